#include "engine/model/safetensors.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/test_dir.h"

namespace kvcast {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using model_internal::TestDir;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A file with the given raw header text and data section.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

std::vector<TensorToWrite> SampleTensors() {
  std::vector<TensorToWrite> tensors;
  tensors.push_back({"w.f32", DType::kF32, {2, 3}, Bytes(std::vector<float>{1, -2, 3.5f, 0, 1e-3f, 7})});
  tensors.push_back({"w.f16", DType::kF16, {4},
                     Bytes(std::vector<uint16_t>{FloatToHalf(1), FloatToHalf(-0.5f), FloatToHalf(3),
                                                 FloatToHalf(65504)})});
  tensors.push_back({"a.bf16", DType::kBF16, {2, 1, 2},
                     Bytes(std::vector<uint16_t>{FloatToBFloat16(2), FloatToBFloat16(-8),
                                                 FloatToBFloat16(0.25f), FloatToBFloat16(100)})});
  tensors.push_back({"empty", DType::kF32, {0, 3}, ""});
  return tensors;
}

void ExpectError(const absl::StatusOr<std::unique_ptr<SafetensorsFile>>& file,
                 absl::StatusCode code, const std::vector<std::string>& substrings) {
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), code) << file.status();
  for (const std::string& s : substrings) {
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(s));
  }
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const std::string path = TestDir() + "/model.safetensors";
  const std::vector<TensorToWrite> tensors = SampleTensors();
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT((*file)->names(), ElementsAre("a.bf16", "empty", "w.f16", "w.f32"));
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  for (const TensorToWrite& t : tensors) {
    const TensorView* view = (*file)->Find(t.name);
    ASSERT_NE(view, nullptr) << t.name;
    EXPECT_EQ(view->dtype, t.dtype);
    EXPECT_EQ(view->shape, t.shape);
    EXPECT_EQ(view->file, path);
    ASSERT_EQ(view->nbytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(view->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
  EXPECT_EQ((*file)->Find("missing"), nullptr);

  std::vector<float> out(4);
  ConvertToFloat(*(*file)->Find("w.f16"), out.data());
  EXPECT_THAT(out, ElementsAre(1, -0.5f, 3, 65504));
  ConvertToFloat(*(*file)->Find("a.bf16"), out.data());
  EXPECT_THAT(out, ElementsAre(2, -8, 0.25f, 100));
  out.resize(6);
  ConvertToFloat(*(*file)->Find("w.f32"), out.data());
  EXPECT_THAT(out, ElementsAre(1, -2, 3.5f, 0, 1e-3f, 7));
}

TEST(Safetensors, WriterIsDeterministicAndPadsHeader) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteSafetensors(dir + "/a.safetensors", SampleTensors()).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/b.safetensors", SampleTensors()).ok());
  absl::StatusOr<std::string> a = model_internal::ReadFile(dir + "/a.safetensors");
  absl::StatusOr<std::string> b = model_internal::ReadFile(dir + "/b.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  uint64_t header_size = 0;
  std::memcpy(&header_size, a->data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(a->substr(8, 1), "{");
  EXPECT_THAT(a->substr(8, header_size), HasSubstr("\"__metadata__\":{\"format\":\"pt\"}"));
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  const std::string path = TestDir() + "/bad.safetensors";
  std::vector<TensorToWrite> tensors = SampleTensors();
  tensors[0].bytes.pop_back();
  absl::Status status = WriteSafetensors(path, tensors);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr(path), HasSubstr("w.f32")));
  tensors = SampleTensors();
  tensors.push_back(tensors[1]);
  EXPECT_EQ(WriteSafetensors(path, tensors).code(), absl::StatusCode::kInvalidArgument);
  tensors = SampleTensors();
  tensors[2].name = "__metadata__";
  EXPECT_EQ(WriteSafetensors(path, tensors).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(model_internal::FileExists(path));
}

TEST(Safetensors, TruncatedFileIsDataLossNamingTensor) {
  const std::string dir = TestDir();
  const std::string good = dir + "/good.safetensors";
  ASSERT_TRUE(WriteSafetensors(good, SampleTensors()).ok());
  absl::StatusOr<std::string> bytes = model_internal::ReadFile(good);
  ASSERT_TRUE(bytes.ok());
  const std::string path = dir + "/model.safetensors";
  // The last tensor written is "empty"; the last one with bytes is "a.bf16".
  ASSERT_TRUE(model_internal::WriteFile(path, bytes->substr(0, bytes->size() - 3)).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss,
              {path, "tensor 'a.bf16'", "truncated"});
  // Every shorter prefix fails cleanly too.
  for (size_t cut = 0; cut < bytes->size(); ++cut) {
    ASSERT_TRUE(model_internal::WriteFile(path, bytes->substr(0, cut)).ok());
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << cut;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path)) << cut;
  }
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
  const std::string path = TestDir() + "/model.safetensors";
  std::string file = RawFile("{}", "");
  file[0] = 100;  // Claims a 100-byte header; only 2 bytes follow.
  ASSERT_TRUE(model_internal::WriteFile(path, file).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, {path, "header length 100"});
  file[7] = 0x7f;  // An absurd length: not a safetensors file at all.
  ASSERT_TRUE(model_internal::WriteFile(path, file).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, {path, "header length"});
  ASSERT_TRUE(model_internal::WriteFile(path, "abc").ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, {path, "too short"});
}

TEST(Safetensors, FromBytesParsesLikeOpen) {
  const std::string data(8, '\x01');
  const std::string file =
      RawFile(R"({"w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}})", data);
  auto st = SafetensorsFile::FromBytes(file, "mem");
  ASSERT_TRUE(st.ok()) << st.status();
  const TensorView* w = (*st)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(w->data, file.data() + file.size() - 8);  // a view of the caller's bytes
  ExpectError(SafetensorsFile::FromBytes(file.substr(0, file.size() - 1), "mem"),
              absl::StatusCode::kDataLoss, {"mem", "past the end"});
  ExpectError(SafetensorsFile::FromBytes("abc", "mem"), absl::StatusCode::kDataLoss,
              {"mem", "header length"});
}

TEST(Safetensors, BadHeaderJson) {
  const std::string path = TestDir() + "/model.safetensors";
  ASSERT_TRUE(model_internal::WriteFile(path, RawFile("{\"x\": {\"dtype\": ", "")).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, {path, "invalid JSON at byte"});
  ASSERT_TRUE(model_internal::WriteFile(path, RawFile("[1, 2]  ", "")).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, {path, "not a JSON object"});
}

TEST(Safetensors, UnsupportedDtype) {
  const std::string path = TestDir() + "/model.safetensors";
  ASSERT_TRUE(model_internal::WriteFile(
      path, RawFile(R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})",
                    std::string(16, '\0'))).ok());
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument,
              {path, "tensor 'ids' has unsupported dtype 'I64'"});
}

TEST(Safetensors, BadTensorEntries) {
  const std::string path = TestDir() + "/model.safetensors";
  struct Case {
    std::string entry;
    absl::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", absl::StatusCode::kDataLoss,
       "past the end"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 12]})", absl::StatusCode::kDataLoss,
       "past the end"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})", absl::StatusCode::kInvalidArgument,
       "begin > end"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 8]})", absl::StatusCode::kInvalidArgument,
       "needs 4"},
      {R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", absl::StatusCode::kInvalidArgument,
       "shape"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})", absl::StatusCode::kInvalidArgument,
       "data_offsets"},
      {R"({"dtype": "F32", "data_offsets": [0, 4]})", absl::StatusCode::kInvalidArgument, "shape"},
      {R"({"shape": [1], "data_offsets": [0, 4]})", absl::StatusCode::kInvalidArgument, "dtype"},
      {R"({"dtype": "F32", "shape": [1]})", absl::StatusCode::kInvalidArgument, "data_offsets"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})", absl::StatusCode::kInvalidArgument,
       "data_offsets"},
      {R"({"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]})",
       absl::StatusCode::kInvalidArgument, "large"},
      {R"(17)", absl::StatusCode::kInvalidArgument, "not a JSON object"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(model_internal::WriteFile(path, RawFile("{\"t\": " + c.entry + "}", std::string(8, 'x'))).ok());
    ExpectError(SafetensorsFile::Open(path), c.code, {path, "tensor 't'", c.message});
  }
}

TEST(Safetensors, MissingFileIsNotFound) {
  const std::string path = TestDir() + "/absent.safetensors";
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kNotFound, {path});
}

TEST(Safetensors, GarbageNeverCrashes) {
  const std::string path = TestDir() + "/garbage.safetensors";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (trial % 2 == 0 && bytes.size() >= 8) {  // Plausible length, garbage header.
      const uint64_t n = bytes.size() - 8;
      std::memcpy(&bytes[0], &n, 8);
    }
    ASSERT_TRUE(model_internal::WriteFile(path, bytes).ok());
    EXPECT_FALSE(SafetensorsFile::Open(path).ok()) << trial;
  }
}

}  // namespace
}  // namespace kvcast
