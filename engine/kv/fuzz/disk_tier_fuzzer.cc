// libFuzzer target for the disk KV tier's chunk files (engine/kv/disk_tier.h),
// which a worker reads back from a directory that outlives it (another
// process, a full disk or a bad sector may have left anything there).
// Each input is the whole content of one chunk file, tried two ways:
//  1. a tier reopened on a directory holding it (the header checks of Open:
//     the file must be ignored and deleted, or indexed and then read back
//     with Get as its payload or DataLoss);
//  2. a valid chunk written by the tier, then overwritten with the input
//     behind the tier's back, then read with Get (its payload or DataLoss).
// The first input byte chooses how much of the header is made right
// (magic, shape, name, size, checksum), so that the deeper checks are
// reached too. Never a crash, a hang or an allocation the header asks for.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/kv/disk_tier.h"
#include "xxhash.h"

namespace {

using kvcast::DiskKvTier;
using kvcast::Hash128;

constexpr size_t kHeaderBytes = 8 + 16 + 16 + 5 * 4 + 8 + 8;

DiskKvTier::Shape TheShape() {
  DiskKvTier::Shape s;
  s.model_fingerprint = Hash128{0x1234, 0x5678};
  s.format = kvcast::KvFormat::kFp16;
  s.chunk_tokens = 4;
  s.layout.num_layers = 1;
  s.layout.num_kv_heads = 1;
  s.layout.head_dim = 8;
  s.layout.page_tokens = 4;
  s.chunk_bytes = 2 * 4 * 8 * 2;  // K and V, 4 tokens x 8 values x 2 bytes
  return s;
}

template <typename T>
void Store(std::string* f, size_t at, T v) {
  if (f->size() >= at + sizeof(T)) std::memcpy(f->data() + at, &v, sizeof(T));
}

// Makes the fields the selector's bits name right, so inputs reach the
// checks behind them.
std::string FixUp(const uint8_t* data, size_t size, const DiskKvTier::Shape& s,
                  const Hash128& chunk) {
  if (size == 0) return "";
  const uint8_t sel = data[0];
  std::string f(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (sel & 1) {
    if (f.size() < kHeaderBytes) f.resize(kHeaderBytes);
    std::memcpy(f.data(), "KVCHUNK1", 8);
  }
  if (sel & 2) {
    Store(&f, 8, s.model_fingerprint.lo);
    Store(&f, 16, s.model_fingerprint.hi);
    Store(&f, 40, uint32_t(s.format));
    Store(&f, 44, uint32_t(s.chunk_tokens));
    Store(&f, 48, uint32_t(s.layout.num_layers));
    Store(&f, 52, uint32_t(s.layout.num_kv_heads));
    Store(&f, 56, uint32_t(s.layout.head_dim));
  }
  if (sel & 4) {
    Store(&f, 24, chunk.lo);
    Store(&f, 32, chunk.hi);
  }
  if (sel & 8) {  // the payload size the shape wants, and that many bytes
    Store(&f, 60, uint64_t(s.chunk_bytes));
    if (f.size() >= kHeaderBytes) f.resize(kHeaderBytes + s.chunk_bytes);
  }
  if ((sel & 16) && f.size() >= kHeaderBytes) {
    Store(&f, 68, uint64_t(XXH3_64bits(f.data() + kHeaderBytes, f.size() - kHeaderBytes)));
  }
  return f;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "disk_tier_fuzzer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const std::string root = [] {  // $TMPDIR (e.g. a tmpfs) or /tmp
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/disk_tier_fuzz.XXXXXX";
    Check(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    return tmpl;
  }();
  const DiskKvTier::Shape shape = TheShape();
  const Hash128 chunk{0xabcdef, 0x42};
  const std::string file = FixUp(data, size, shape, chunk);
  const std::string dir = root + "/d";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const std::string path = dir + "/" + chunk.ToHex() + ".kvchunk";

  // 1. Found at Open.
  WriteFile(path, file);
  {
    auto tier = DiskKvTier::Open(dir, shape, 1 << 20);
    Check(tier.ok(), "Open failed on a readable directory");
    for (const Hash128& h : (*tier)->Chunks()) {
      auto got = (*tier)->Get(h);
      Check(got.ok() ? got->size() == shape.chunk_bytes : absl::IsDataLoss(got.status()),
            "Get of an indexed chunk: neither its payload nor DataLoss");
    }
  }
  // 2. Changed behind the tier's back.
  fs::remove_all(dir, ec);
  {
    auto tier = DiskKvTier::Open(dir, shape, 1 << 20);
    Check(tier.ok(), "Open of an empty directory failed");
    std::vector<uint8_t> payload(shape.chunk_bytes, 7);
    std::vector<Hash128> dropped;
    (*tier)->Put(chunk, payload, XXH3_64bits(payload.data(), payload.size()), &dropped);
    (*tier)->WaitForWrites();
    WriteFile(path, file);
    auto got = (*tier)->Get(chunk);
    Check(got.ok() ? got->size() == shape.chunk_bytes : absl::IsDataLoss(got.status()),
          "Get of a changed file: neither a payload nor DataLoss");
  }
  return 0;
}
