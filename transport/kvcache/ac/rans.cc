// Interleaved rANS tables: see rans.h.
#include "transport/kvcache/ac/rans.h"

#include <algorithm>
#include <array>

namespace kvcast::kvcache::ac {

std::vector<uint16_t> NormalizeFrequencies(absl::Span<const uint32_t> counts) {
  std::vector<uint16_t> freqs(counts.size());
  NormalizeFrequencies(counts, freqs.data());
  return freqs;
}

void NormalizeFrequencies(absl::Span<const uint32_t> counts, uint16_t* freqs) {
  const size_t n = counts.size();
  uint64_t total = 0;
  for (uint32_t c : counts) total += c;
  if (total == 0) {
    std::fill(freqs, freqs + n, 0);
    return;
  }
  // floor(a / total) from a double reciprocal (a 64-bit division per
  // symbol cost more than the rest): a = count * M < 2^44 is exact in a
  // double and the product is within 2^-40 of a / total; a quotient that
  // is not an integer is at least 1 / total >= 2^-32 from one, so only an
  // integer quotient can come out one low, which the test corrects.
  const double rcp = 1.0 / double(total);
  int32_t sum = 0;
  for (size_t s = 0; s < n; ++s) {
    const uint64_t a = uint64_t(counts[s]) * kProbScale;
    uint64_t q = static_cast<uint64_t>(double(a) * rcp);
    q += (q + 1) * total <= a;
    const uint16_t f = counts[s] == 0 ? 0 : static_cast<uint16_t>(std::max<uint64_t>(1, q));
    freqs[s] = f;
    sum += f;
  }
  // Rounding down leaves a surplus for the most frequent symbol; the
  // minimum of 1 can overshoot, taken back from the largest frequencies.
  SettleSurplus(int32_t(kProbScale) - sum, freqs, int(n), [](const uint16_t* f, int m) {
    return int(std::max_element(f, f + m) - f);
  });
}

namespace {

// Checks `freqs` and calls visit(symbol, freq, cum) for each.
template <typename Visit>
bool ForEachSymbol(absl::Span<const uint16_t> freqs, Visit visit) {
  if (freqs.empty() || freqs.size() > kMaxSymbols) return false;
  uint32_t c = 0;
  for (size_t s = 0; s < freqs.size(); ++s) {
    if (c + freqs[s] > kProbScale) return false;
    visit(s, freqs[s], c);
    c += freqs[s];
  }
  return c == kProbScale;
}

}  // namespace

bool ValidFrequencies(absl::Span<const uint16_t> freqs) {
  return ForEachSymbol(freqs, [](size_t, uint32_t, uint32_t) {});
}

bool BuildEncodeTable(absl::Span<const uint16_t> freqs, uint32_t* fc, double* rcp) {
  // 1.0 / f for every f, once (a division per entry was a visible cost).
  static const std::array<double, kProbScale + 1> kReciprocals = [] {
    std::array<double, kProbScale + 1> r{};
    for (uint32_t f = 1; f <= kProbScale; ++f) r[f] = 1.0 / f;
    return r;
  }();
  return ForEachSymbol(freqs, [&](size_t s, uint32_t f, uint32_t c) {
    fc[s] = (f << 16) | c;
    rcp[s] = kReciprocals[f];  // 0 for f = 0
  });
}

bool BuildDecodeTable(absl::Span<const uint16_t> freqs, uint32_t* slot) {
  return ForEachSymbol(freqs, [&](size_t s, uint32_t f, uint32_t c) {
    if (f > 0) std::fill(slot + c, slot + c + f, (uint32_t(s) << 24) | ((f - 1) << 12) | c);
  });
}

}  // namespace kvcast::kvcache::ac
