#include "transport/moqt/group_spill.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/moqt/track_cache.h"

namespace kvcast::moqt {
namespace {

std::string Dir() {
  const std::string d = absl::StrCat(testing::TempDir(), "/spill_",
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(d);
  return d;
}

FullTrackName Track(const std::string& name = "fp16") {
  return FullTrackName{{"kvcache", "model", "prompt"}, name};
}

// Group `g` of `n` objects of `size` bytes each, the last one ending the group.
std::vector<SpilledObject> GroupOf(uint64_t g, int n, size_t size) {
  std::vector<SpilledObject> out;
  for (int i = 0; i < n; ++i) {
    SpilledObject o;
    o.header.group = g;
    o.header.object = uint64_t(i);
    o.header.status = i + 1 == n ? ObjectStatus::kEndOfGroup : ObjectStatus::kNormal;
    o.header.extensions.push_back(KeyValuePair{3, 0, "ext"});
    o.payload.assign(size, char('a' + (g * 7 + i) % 26));
    o.header.payload_length = size;
    out.push_back(std::move(o));
  }
  return out;
}

void ExpectSame(const std::vector<SpilledObject>& got, const std::vector<SpilledObject>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].header.object, want[i].header.object);
    EXPECT_EQ(got[i].header.status, want[i].header.status);
    EXPECT_EQ(got[i].header.extensions, want[i].header.extensions);
    EXPECT_EQ(got[i].payload, want[i].payload);
  }
}

TEST(GroupSpillTest, GroupsComeBackWhetherQueuedOrOnDisk) {
  auto spill = *GroupSpill::Open(Dir(), 1 << 20);
  spill->Put(Track(), 0, GroupOf(0, 3, 100), false);
  auto queued = spill->Take(Track(), 0);  // possibly not written yet
  ASSERT_TRUE(queued);
  ExpectSame(*queued, GroupOf(0, 3, 100));
  EXPECT_FALSE(spill->Take(Track(), 0)) << "taken: gone";
  spill->Put(Track(), 1, GroupOf(1, 2, 100), true);
  spill->WaitForWrites();
  ASSERT_EQ(spill->Entries().size(), 1u);
  EXPECT_EQ(spill->Entries()[0].last_object, 1u);
  EXPECT_TRUE(spill->Entries()[0].ends_track);
  auto written = spill->Take(Track(), 1);
  ASSERT_TRUE(written);
  ExpectSame(*written, GroupOf(1, 2, 100));
  EXPECT_EQ(spill->stats().bytes, 0u);
  EXPECT_EQ(spill->stats().reads, 2u);
}

TEST(GroupSpillTest, TheBudgetDropsTheOldestAndARestartKeepsTheRest) {
  const std::string dir = Dir();
  {
    auto spill = *GroupSpill::Open(dir, 2500);  // two groups of ~1.1 KB fit
    for (uint64_t g = 0; g < 3; ++g) spill->Put(Track(), g, GroupOf(g, 2, 500), false);
    EXPECT_EQ(spill->stats().groups, 2u);
    EXPECT_EQ(spill->stats().evictions, 1u);
    EXPECT_FALSE(spill->Take(Track(), 0));
  }  // the destructor finishes the writes
  // A truncated file and a stray temporary are not served (and are deleted).
  { std::ofstream(dir + "/99.kvg") << "KVRGRP01 truncated"; }
  { std::ofstream(dir + "/98.kvg.tmp") << "half"; }
  auto again = *GroupSpill::Open(dir, 2500);
  EXPECT_EQ(again->stats().rejected, 1u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/99.kvg"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/98.kvg.tmp"));
  ASSERT_EQ(again->Entries().size(), 2u);
  EXPECT_EQ(again->Entries()[0].group, 1u) << "oldest first";
  auto g2 = again->Take(Track(), 2);
  ASSERT_TRUE(g2);
  ExpectSame(*g2, GroupOf(2, 2, 500));
}

TEST(GroupSpillTest, TheRelayCacheSpillsCompleteGroupsAndServesThemAfterARestart) {
  const std::string dir = Dir();
  auto insert = [](TrackCache& cache, uint64_t g) {
    for (const SpilledObject& o : GroupOf(g, 4, 1000)) {
      cache.Insert(Track(), o.header,
                   absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(o.payload.data()),
                                             o.payload.size()));
    }
  };
  auto read = [](TrackCache& cache, uint64_t g) {
    std::vector<SpilledObject> got;
    cache.ForEach(Track(), Location{g, 0}, Location{g, 100},
                  [&](const ObjectHeader& h, const quic::SharedBytes& p) {
                    got.push_back(SpilledObject{h, std::string(p.bytes.begin(), p.bytes.end())});
                  });
    return got;
  };
  {
    auto spill = *GroupSpill::Open(dir, 1 << 20);
    TrackCache cache(5000);  // about one group of 4 x 1000 bytes
    cache.SetSpill(spill.get());
    for (uint64_t g = 0; g < 3; ++g) insert(cache, g);
    cache.MarkEnded(Track(), Location{2, 3});
    EXPECT_EQ(cache.evicted_groups(), 2u);
    EXPECT_EQ(spill->stats().groups, 2u) << "groups 0 and 1 went to disk";
    // A lookup brings group 0 back (and pushes another group down).
    EXPECT_TRUE(cache.Covers(Track(), Location{0, 0}, Location{0, 3}));
    ExpectSame(read(cache, 0), GroupOf(0, 4, 1000));
    ExpectSame(read(cache, 1), GroupOf(1, 4, 1000));
    ExpectSame(read(cache, 2), GroupOf(2, 4, 1000));
    EXPECT_LE(cache.bytes(), 5000u);
  }  // the relay stops; its memory is gone, its spill is not
  auto spill = *GroupSpill::Open(dir, 1 << 20);
  TrackCache cache(5000);
  cache.SetSpill(spill.get());
  ASSERT_TRUE(cache.Has(Track()));
  ASSERT_TRUE(cache.Largest(Track()));
  // What was in memory at the stop is lost; what was spilled is served.
  const uint64_t spilled = spill->Entries()[0].group;
  EXPECT_TRUE(cache.Covers(Track(), Location{spilled, 0}, Location{spilled, 3}));
  ExpectSame(read(cache, spilled), GroupOf(spilled, 4, 1000));
}

}  // namespace
}  // namespace kvcast::moqt
