#include "transport/kvcache/ac/rans.h"

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

TEST(RansTable, RejectsFrequenciesThatDoNotSumToTheScale) {
  RansTable t;
  RansDecodeTable d;
  EXPECT_FALSE(t.Build(std::vector<uint16_t>{100, 200}));
  EXPECT_FALSE(d.Build(std::vector<uint16_t>{4096, 1}));
  EXPECT_FALSE(d.Build({}));
  EXPECT_FALSE(d.Build(std::vector<uint16_t>(257, 16)));
  EXPECT_TRUE(d.Build(std::vector<uint16_t>{0, 4096, 0}));
  EXPECT_EQ(d.num_symbols, 3);
}

// Encodes `symbols` (symbol i with table tables[i % tables.size()]) on 16
// lanes, decodes them back and checks every state returns to 2^16.
size_t RoundTrip(const std::vector<int>& symbols, const std::vector<std::vector<uint16_t>>& freqs) {
  std::vector<RansTable> enc(freqs.size());
  std::vector<RansDecodeTable> dec(freqs.size());
  for (size_t k = 0; k < freqs.size(); ++k) {
    EXPECT_TRUE(enc[k].Build(freqs[k]));
    EXPECT_TRUE(dec[k].Build(freqs[k]));
  }
  std::vector<uint8_t> buf(symbols.size() * 2 + 2);
  uint8_t* w = buf.data() + buf.size();
  uint32_t state[kLanes];
  std::fill(state, state + kLanes, kStateLow);
  for (size_t i = symbols.size(); i-- > 0;) {
    RansEncode(&state[i % kLanes], enc[i % freqs.size()], symbols[i], &w);
  }
  const uint8_t* r = w;
  const uint8_t* end = buf.data() + buf.size();
  bool overrun = false;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const int s = RansDecode(&state[i % kLanes], dec[i % freqs.size()], &r, end, &overrun);
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
