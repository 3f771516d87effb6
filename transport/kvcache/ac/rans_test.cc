#include "transport/kvcache/ac/rans.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace kvcast::kvcache::ac {
namespace {

TEST(NormalizeFrequencies, SumsToTheScaleAndKeepsEverySeenSymbol) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + rng() % kMaxSymbols;
    std::vector<uint32_t> counts(n);
    for (auto& c : counts) c = rng() % 3 == 0 ? 0 : rng() % (trial % 2 ? 10 : 1000000);
    counts[rng() % n] = 1 + rng() % 100;
    const auto f = NormalizeFrequencies(counts);
    ASSERT_EQ(std::accumulate(f.begin(), f.end(), 0u), kProbScale);
    for (int s = 0; s < n; ++s) EXPECT_EQ(counts[s] > 0, f[s] > 0) << s;
  }
  // 256 symbols of one count each: 16 slots each.
  EXPECT_EQ(NormalizeFrequencies(std::vector<uint32_t>(256, 1))[7], 16);
}

// The frequencies by definition (floor(count * M / total) with a 64-bit
// division per symbol): the encoder's bytes depend on them.
std::vector<uint16_t> ReferenceFrequencies(const std::vector<uint32_t>& counts) {
  std::vector<uint16_t> freqs(counts.size(), 0);
  uint64_t total = 0;
  for (uint32_t c : counts) total += c;
  if (total == 0) return freqs;
  int32_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    freqs[s] = static_cast<uint16_t>(std::max<uint64_t>(1, uint64_t(counts[s]) * kProbScale / total));
    sum += freqs[s];
  }
  int32_t diff = int32_t(kProbScale) - sum;
  while (diff != 0) {
    const size_t top = std::max_element(freqs.begin(), freqs.end()) - freqs.begin();
    if (diff > 0) {
      freqs[top] += diff;
      diff = 0;
    } else {
      const int32_t take = std::min<int32_t>(-diff, freqs[top] - 1);
      freqs[top] -= take;
      diff += take;
      if (take == 0) break;
    }
  }
  return freqs;
}

TEST(NormalizeFrequencies, MatchesTheReferenceExactly) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    const int n = 1 + rng() % kMaxSymbols;
    std::vector<uint32_t> counts(n);
    const uint32_t range = trial % 4 == 0 ? 4 : trial % 4 == 1 ? 1000 : trial % 4 == 2 ? 1u << 22 : 40;
    for (auto& c : counts) c = rng() % 2 == 0 ? 0 : rng() % range;
    // Quotients that are exact integers (total a power of two, counts that
    // divide it) and counts past 2^20 (their product with M needs 64 bits).
    if (trial % 7 == 0) std::fill(counts.begin(), counts.end(), 1u << (rng() % 12));
    if (trial % 11 == 0) counts[rng() % n] = (1u << 20) + rng() % (1u << 24);
    counts[rng() % n] |= 1;
    std::vector<uint16_t> got(n, 9);
    NormalizeFrequencies(counts, got.data());
    ASSERT_EQ(got, ReferenceFrequencies(counts)) << trial;
  }
}

// A group of 8192 tokens x 128 channels has units of 2^20 values: counts
// that large must not wrap (they once did, in 32 bits).
TEST(NormalizeFrequencies, LargeCountsStayProportional) {
  EXPECT_EQ(NormalizeFrequencies(std::vector<uint32_t>{3u << 20, 1u << 20}),
            (std::vector<uint16_t>{3072, 1024}));
  EXPECT_EQ(NormalizeFrequencies(std::vector<uint32_t>{0, 1u << 30, 1u << 30}),
            (std::vector<uint16_t>{0, 2048, 2048}));
}

TEST(RansTables, RejectFrequenciesThatDoNotSumToTheScale) {
  std::vector<uint32_t> fc(kMaxSymbols), slot(kProbScale);
  std::vector<double> rcp(kMaxSymbols);
  EXPECT_FALSE(BuildEncodeTable(std::vector<uint16_t>{100, 200}, fc.data(), rcp.data()));
  EXPECT_FALSE(BuildDecodeTable(std::vector<uint16_t>{4096, 1}, slot.data()));
  EXPECT_FALSE(BuildDecodeTable({}, slot.data()));
  EXPECT_FALSE(BuildDecodeTable(std::vector<uint16_t>(257, 16), slot.data()));
  EXPECT_TRUE(BuildDecodeTable(std::vector<uint16_t>{0, 4096, 0}, slot.data()));
  EXPECT_EQ(slot[1234] >> 24, 1u);
}

TEST(Rans, DoubleReciprocalDivisionIsExact) {
  // Every divisor, the quotients' edges and a random spread of numerators.
  std::mt19937 rng(3);
  for (uint32_t f = 1; f <= kProbScale; ++f) {
    const double rcp = 1.0 / f;
    for (int k = 0; k < 64; ++k) {
      const uint32_t q = k < 32 ? uint32_t((uint64_t{0xffffffff} / f) - k) : rng() / f;
      for (uint64_t x : {uint64_t{q} * f, uint64_t{q} * f + f - 1, uint64_t{q} * f + (f - 1) / 2}) {
        if (x > 0xffffffffu) continue;
        ASSERT_EQ(uint32_t(double(x) * rcp + kDivisionNudge), uint32_t(x / f)) << x << " / " << f;
      }
    }
  }
}

// Encodes `symbols` (symbol i with table tables[i % tables.size()]) on 16
// lanes, decodes them back and checks every state returns to 2^16.
size_t RoundTrip(const std::vector<int>& symbols, const std::vector<std::vector<uint16_t>>& freqs) {
  const size_t k = freqs.size();
  std::vector<uint32_t> fc(k * kMaxSymbols), slot(k * kProbScale);
  std::vector<double> rcp(k * kMaxSymbols);
  for (size_t t = 0; t < k; ++t) {
    EXPECT_TRUE(BuildEncodeTable(freqs[t], &fc[t * kMaxSymbols], &rcp[t * kMaxSymbols]));
    EXPECT_TRUE(BuildDecodeTable(freqs[t], &slot[t * kProbScale]));
  }
  std::vector<uint8_t> buf(symbols.size() * 2 + 2);
  uint8_t* w = buf.data() + buf.size();
  uint32_t state[kLanes];
  std::fill(state, state + kLanes, kStateLow);
  for (size_t i = symbols.size(); i-- > 0;) {
    const size_t e = (i % k) * kMaxSymbols + symbols[i];
    RansEncode(&state[i % kLanes], fc[e], rcp[e], &w);
  }
  const uint8_t* r = w;
  const uint8_t* end = buf.data() + buf.size();
  bool overrun = false;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const int s = RansDecode(&state[i % kLanes], &slot[(i % k) * kProbScale], &r, end, &overrun);
    if (s != symbols[i]) {
      ADD_FAILURE() << "symbol " << i << ": " << s << " != " << symbols[i];
      break;
    }
  }
  EXPECT_FALSE(overrun);
  EXPECT_EQ(r, end);
  for (uint32_t x : state) EXPECT_EQ(x, kStateLow);
  return end - w;
}

TEST(Rans, RoundTripsSkewedAndFlatModelsNearTheirEntropy) {
  std::mt19937 rng(7);
  std::vector<uint32_t> c1(40), c2(256, 1), c3{1, 0, 0, 5000};
  for (int s = 0; s < 40; ++s) c1[s] = uint32_t(100000 * std::exp(-0.5 * s));
  const std::vector<std::vector<uint16_t>> freqs = {NormalizeFrequencies(c1),
                                                    NormalizeFrequencies(c2),
                                                    NormalizeFrequencies(c3)};
  std::vector<int> symbols(160000);
  double bits = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const auto& f = freqs[i % 3];
    std::discrete_distribution<int> pick(f.begin(), f.end());
    symbols[i] = pick(rng);
    bits -= std::log2(f[symbols[i]] / double(kProbScale));
  }
  const size_t bytes = RoundTrip(symbols, freqs);
  // Within 1% (plus the flushed states) of the model's information content.
  EXPECT_LT(bytes, bits / 8 * 1.01 + 64);
  EXPECT_GT(bytes, bits / 8 * 0.99 - 64);
}

TEST(Rans, CertainSymbolsCostNothing) {
  EXPECT_EQ(RoundTrip(std::vector<int>(10000, 2), {{0, 0, 4096}}), 0u);
}

TEST(Rans, ExtremeFrequencies) {
  std::vector<uint16_t> f(256, 1);
  f[0] = 4096 - 255;  // a symbol of probability 1/4096 next to a dominant one
  std::vector<int> symbols;
  for (int i = 0; i < 5000; ++i) symbols.push_back(i % 17 == 0 ? 255 - i % 255 : 0);
  RoundTrip(symbols, {f});
}

}  // namespace
}  // namespace kvcast::kvcache::ac
