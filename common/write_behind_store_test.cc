#include "common/write_behind_store.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const std::string> Bytes(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

// Files whose content starts with "key:" hold that key.
std::optional<std::string> KeyOf(const std::string& path, uint64_t) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return s.substr(0, colon);
}

class WriteBehindStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/wbs_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }
  std::unique_ptr<WriteBehindStore> Open(uint64_t budget) {
    auto s = WriteBehindStore::Open("test store", dir_, ".f", names_, budget, KeyOf);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  int Files() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().extension() == ".f";
    return n;
  }
  std::string dir_;
  WriteBehindStore::Names names_ = WriteBehindStore::Names::kBySerial;
};

TEST_F(WriteBehindStoreTest, AFileIsReadFromMemoryUntilWrittenThenFromDisk) {
  auto s = Open(1000);
  ASSERT_TRUE(s->Put("a", Bytes("a:hello")));
  auto r = s->Read("a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, "a:hello");
  s->WaitForWrites();
  EXPECT_EQ(Files(), 1);
  EXPECT_EQ(s->stats().writes, 1u);
  EXPECT_EQ(s->stats().pending, 0u);
  r = s->Read("a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, "a:hello");
  EXPECT_EQ(s->Read("b").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WriteBehindStoreTest, TheBudgetDropsTheLeastRecentlyUsedAndReportsIt) {
  auto s = Open(30);
  ASSERT_TRUE(s->Put("a", Bytes("a:123456789")));  // 11 bytes each
  ASSERT_TRUE(s->Put("b", Bytes("b:123456789")));
  ASSERT_TRUE(s->Touch("a"));  // b is now the oldest
  std::vector<std::string> evicted;
  ASSERT_TRUE(s->Put("c", Bytes("c:123456789"), &evicted));
  EXPECT_EQ(evicted, std::vector<std::string>{"b"});
  EXPECT_EQ(s->Keys(), (std::vector<std::string>{"a", "c"}));
  EXPECT_FALSE(s->Put("d", Bytes(std::string(31, 'x'))));  // alone over the budget
  EXPECT_FALSE(s->Contains("d"));
  // Replacing a key keeps one file for it.
  ASSERT_TRUE(s->Put("a", Bytes("a:replaced")));
  s->WaitForWrites();
  EXPECT_EQ(Files(), 2);
  EXPECT_EQ(**s->Read("a"), "a:replaced");
  EXPECT_EQ(s->stats().evictions, 1u);
}

TEST_F(WriteBehindStoreTest, AReopenedStoreFindsItsFilesOldestFirstAndRefusesOthers) {
  {
    auto s = Open(1000);
    for (std::string k : {"x", "y", "z"}) ASSERT_TRUE(s->Put(k, Bytes(k + ":data")));
  }  // the destructor finishes the writes
  std::ofstream(dir_ + "/junk.f") << "no key here";
  std::ofstream(dir_ + "/9.f.tmp") << "a write cut short";
  auto s = Open(1000);
  EXPECT_EQ(s->Keys(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(s->stats().rejected, 1u);
  EXPECT_FALSE(fs::exists(dir_ + "/junk.f"));
  EXPECT_FALSE(fs::exists(dir_ + "/9.f.tmp"));
  EXPECT_EQ(**s->Read("y"), "y:data");
  // New files do not reuse an old file's name.
  ASSERT_TRUE(s->Put("w", Bytes("w:new")));
  s.reset();
  s = Open(13);  // room for two 6-byte files: the oldest goes
  EXPECT_EQ(s->Keys(), (std::vector<std::string>{"z", "w"}));
}

TEST_F(WriteBehindStoreTest, FilesNamedByKeyAreFoundUnderThatName) {
  names_ = WriteBehindStore::Names::kByKey;
  auto s = Open(1000);
  ASSERT_TRUE(s->Put("k1", Bytes("k1:v")));
  // Dropped and put again while the first write may still run: one file, the new bytes.
  s->Remove("k1");
  ASSERT_TRUE(s->Put("k1", Bytes("k1:w")));
  s->WaitForWrites();
  std::ifstream in(dir_ + "/k1.f");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "k1:w");
  EXPECT_EQ(Files(), 1);
}

TEST_F(WriteBehindStoreTest, AFileThatChangedOnDiskIsDataLossAndDropped) {
  auto s = Open(1000);
  ASSERT_TRUE(s->Put("a", Bytes("a:12345")));
  s->WaitForWrites();
  for (const auto& e : fs::directory_iterator(dir_)) std::ofstream(e.path()) << "a:123456789";
  EXPECT_EQ(s->Read("a").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(s->Contains("a"));
  EXPECT_EQ(s->stats().rejected, 1u);
  EXPECT_EQ(Files(), 0);
}

TEST_F(WriteBehindStoreTest, AWriteThatFailsLosesOnlyItsKey) {
  auto s = Open(1000);
  fs::remove_all(dir_);  // nowhere to write
  ASSERT_TRUE(s->Put("a", Bytes("a:1")));
  s->WaitForWrites();
  EXPECT_FALSE(s->Contains("a"));
  EXPECT_EQ(s->stats().files, 0u);
  EXPECT_EQ(s->stats().pending, 0u);
  fs::create_directories(dir_);
  ASSERT_TRUE(s->Put("b", Bytes("b:2")));
  s->WaitForWrites();
  EXPECT_EQ(**s->Read("b"), "b:2");
}

}  // namespace
}  // namespace kvcast
