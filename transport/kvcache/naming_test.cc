// KVCache names: track strings, namespace parsing and the prompt digest.
#include "transport/kvcache/naming.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvcast::kvcache {
namespace {

const std::string kModel = "0123456789abcdef0123456789abcdef";
const std::string kDigest = "fedcba9876543210fedcba9876543210";

TEST(Naming, EveryFormatRoundTripsThroughItsTrackName) {
  const char* expected[] = {"fp16", "bf16", "fp8-e4m3", "int8", "fp4-e2m1", "int4"};
  int i = 0;
  for (KvFormat f : kAllKvFormats) {
    EXPECT_EQ(TrackNameOf(f), expected[i++]);
    auto back = CompressionOfTrackName(TrackNameOf(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, KvCompression(f));
  }
  for (const ac::AcPolicy* p : {&ac::AcHigh(), &ac::AcLow()}) {
    auto back = CompressionOfTrackName(p->track);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->ac, p);
    EXPECT_EQ(TrackNameOf(*back), p->track);
  }
  EXPECT_EQ(TrackNameOf(KvCompression(&ac::AcLow())), "ac-lo");
  EXPECT_FALSE(KvCompression(&ac::AcLow()) == KvCompression(KvFormat::kFp16));
  for (const xl::XlPoint* p : {&xl::XlHigh(), &xl::XlLow()}) {
    auto back = CompressionOfTrackName(p->track);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->xl, p);
    EXPECT_FALSE(back->fixed_size());
    EXPECT_EQ(TrackNameOf(*back), p->track);
    EXPECT_FALSE(*back == KvCompression(KvFormat::kFp16));
    EXPECT_FALSE(*back == KvCompression(&ac::AcHigh()));
  }
  EXPECT_FALSE(KvCompression(&xl::XlHigh()) == KvCompression(&xl::XlLow()));
  EXPECT_TRUE(KvCompression(KvFormat::kInt8).fixed_size());
}

TEST(Naming, TheFourBitFormatsHaveRotatedTracks) {
  for (auto [f, name] : {std::pair{KvFormat::kInt4, "int4-rot"},
                         std::pair{KvFormat::kFp4E2M1, "fp4-e2m1-rot"}}) {
    const KvCompression rotated(f, true);
    EXPECT_EQ(TrackNameOf(rotated), name);
    auto back = CompressionOfTrackName(name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, rotated);
    EXPECT_TRUE(back->rotated);
    EXPECT_FALSE(*back == KvCompression(f));
    EXPECT_TRUE(KvCompression(f) < rotated);
  }
  // Other formats rotate only in the quality harness: no track parses to them.
  EXPECT_EQ(TrackNameOf(KvCompression(KvFormat::kInt8, true)), "int8-rot");
  EXPECT_EQ(CompressionOfTrackName("int8-rot").status().code(), absl::StatusCode::kNotFound);
}

TEST(Naming, UnknownTrackNamesAreRefusedWithTheKnownOnes) {
  auto unknown = CompressionOfTrackName("FP16");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("known: fp16, bf16"), std::string::npos)
      << unknown.status();
  EXPECT_NE(unknown.status().message().find("int4, fp4-e2m1-rot, int4-rot, ac, ac-lo, xl, xl-lo"),
            std::string::npos)
      << unknown.status();
}

TEST(Naming, FullTrackNameIsRootModelDigestAndCompression) {
  moqt::FullTrackName name = FullTrackNameOf({kModel, kDigest, KvFormat::kInt8});
  ASSERT_EQ(name.ns.size(), 3u);
  EXPECT_EQ(name.ns[0], "moq://kvcache.moq.arpa/v1/");
  EXPECT_EQ(name.ns[1], kModel);
  EXPECT_EQ(name.ns[2], kDigest);
  EXPECT_EQ(name.name, "int8");
  auto parsed = ParseTrack(name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->model_id, kModel);
  EXPECT_EQ(parsed->prompt_digest, kDigest);
  EXPECT_EQ(parsed->compression, KvCompression(KvFormat::kInt8));
  EXPECT_TRUE(IsKvNamespace(name.ns));
}

TEST(Naming, MalformedNamespacesAreInvalidArgument) {
  const moqt::TrackNamespace bad[] = {
      {},
      {"moq://kvcache.moq.arpa/v1/", kModel},
      {"moq://kvcache.moq.arpa/v2/", kModel, kDigest},
      {"moq://kvcache.moq.arpa/v1/", kModel, kDigest, "extra"},
      {"moq://kvcache.moq.arpa/v1/", "0123456789ABCDEF0123456789ABCDEF", kDigest},
      {"moq://kvcache.moq.arpa/v1/", kModel, kDigest.substr(1)},
  };
  for (const auto& ns : bad) {
    auto parsed = ParseTrack({ns, "fp16"});
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << ns.size() << " " << parsed.status();
  }
  EXPECT_EQ(ParseTrack({NamespaceOf(kModel, kDigest), "zstd"}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Naming, ModelIdIsTheFingerprintInHex) {
  EXPECT_EQ(ModelId(Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull}),
            "fedcba98765432100123456789abcdef");
}

// Golden digests computed with PyPI's `xxhash` 4.1.0 (an independent XXH3
// implementation) from the definition in naming.h; they pin the wire format.
TEST(Naming, PromptDigestMatchesTheIndependentlyComputedGoldens) {
  const Hash128 seed = PrefixSeed(Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull});
  std::vector<int32_t> tokens(300);
  for (int i = 0; i < 300; ++i) tokens[i] = i * 7 % 1000;
  EXPECT_EQ(PromptDigest(seed, tokens, 128).ToHex(), "fcca3cdd24d23c40c915570a2b8bd922");
  EXPECT_EQ(PromptDigest(seed, absl::MakeSpan(tokens).subspan(0, 256), 128).ToHex(),
            "c5cafd37803f633a34a3b01a6d9857d9");
  const int32_t one[] = {5};
  EXPECT_EQ(PromptDigest(seed, one, 128).ToHex(), "63bc98010a71882b3aecbf795088e547");
}

TEST(Naming, PromptDigestSeparatesEveryTokenLengthAndSalt) {
  const Hash128 seed = PrefixSeed(Hash128{1, 2});
  std::vector<int32_t> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 0);
  const Hash128 base = PromptDigest(seed, tokens, 128);
  for (int pos : {0, 127, 128, 199}) {
    auto changed = tokens;
    changed[pos] += 1;
    EXPECT_NE(PromptDigest(seed, changed, 128), base) << pos;
  }
  auto shorter = tokens;
  shorter.pop_back();
  EXPECT_NE(PromptDigest(seed, shorter, 128), base);
  auto padded = tokens;
  padded.push_back(0);
  EXPECT_NE(PromptDigest(seed, padded, 128), base);
  EXPECT_NE(PromptDigest(PrefixSeed(Hash128{1, 2}, "tenant-a"), tokens, 128), base);
  EXPECT_EQ(PromptDigest(seed, tokens, 128), base);
}

}  // namespace
}  // namespace kvcast::kvcache
