// libFuzzer target for the relay's spill files (transport/moqt/group_spill.h),
// which a restarted relay reads back from a directory that outlived it.
// Each input is the body of one group file (after the magic and the
// checksum, which the harness writes so the structure behind them is
// reached; the first input byte's low bit leaves the checksum wrong
// instead). A reopened spill must drop the file or index it; an indexed
// group must come back whole through Take, and go back in with Put and out
// again unchanged. Never a crash, a hang or an allocation the file asks for.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "transport/moqt/group_spill.h"
#include "xxhash.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "group_spill_fuzzer: %s\n", what);
    std::abort();
  }
}

bool Same(const std::vector<kvcast::moqt::SpilledObject>& a,
          const std::vector<kvcast::moqt::SpilledObject>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto &x = a[i].header, &y = b[i].header;
    if (a[i].payload != b[i].payload || x.group != y.group || x.subgroup != y.subgroup ||
        x.object != y.object || x.publisher_priority != y.publisher_priority ||
        x.status != y.status || !(x.extensions == y.extensions)) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  using kvcast::moqt::GroupSpill;
  static const std::string root = [] {
    char tmpl[] = "/tmp/group_spill_fuzz.XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  if (size == 0) return 0;
  const bool bad_checksum = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file = "KVRGRP01";
  uint64_t sum = XXH3_64bits(body.data(), body.size()) ^ (bad_checksum ? 1 : 0);
  for (int i = 0; i < 8; ++i) file.push_back(char(sum >> (8 * i)));
  file += body;
  const std::string dir = root + "/d";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  std::ofstream(dir + "/1.kvg", std::ios::binary).write(file.data(), file.size());

  auto spill = GroupSpill::Open(dir, 1 << 20);
  Check(spill.ok(), "Open failed on a readable directory");
  const auto entries = (*spill)->Entries();
  Check(entries.size() <= 1, "one file, more than one group");
  Check(!(bad_checksum && !entries.empty()), "a file with a wrong checksum was indexed");
  for (const GroupSpill::Entry& e : entries) {
    auto objects = (*spill)->Take(e.track, e.group);
    Check(objects.has_value(), "an indexed group did not come back");
    uint64_t last = 0;
    for (const auto& o : *objects) last = std::max(last, o.header.object);
    Check(objects->empty() || last == e.last_object, "the entry's last object is not the last");
    (*spill)->Put(e.track, e.group, *objects, e.ends_track);
    auto again = (*spill)->Take(e.track, e.group);
    Check(again.has_value() && Same(*again, *objects), "Put then Take changed the group");
  }
  return 0;
}
