// Interleaved rANS tables: see rans.h.
#include "transport/kvcache/ac/rans.h"

#include <algorithm>

namespace kvcast::kvcache::ac {

std::vector<uint16_t> NormalizeFrequencies(absl::Span<const uint32_t> counts) {
  std::vector<uint16_t> freqs(counts.size(), 0);
  uint64_t total = 0;
  for (uint32_t c : counts) total += c;
  if (total == 0) return freqs;
  int32_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    freqs[s] = static_cast<uint16_t>(std::max<uint64_t>(1, counts[s] * kProbScale / total));
    sum += freqs[s];
  }
  // Rounding down leaves a surplus for the most frequent symbol; the
  // minimum of 1 can overshoot, taken back from the largest frequencies.
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
      if (take == 0) break;  // unreachable: at most 256 symbols of >= 1 each
    }
  }
  return freqs;
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

bool BuildEncodeTable(absl::Span<const uint16_t> freqs, uint32_t* fc, double* rcp) {
  return ForEachSymbol(freqs, [&](size_t s, uint32_t f, uint32_t c) {
    fc[s] = (f << 16) | c;
    rcp[s] = f ? 1.0 / f : 0.0;
  });
}

bool BuildDecodeTable(absl::Span<const uint16_t> freqs, uint32_t* slot) {
  return ForEachSymbol(freqs, [&](size_t s, uint32_t f, uint32_t c) {
    if (f > 0) std::fill(slot + c, slot + c + f, (uint32_t(s) << 24) | ((f - 1) << 12) | c);
  });
}

}  // namespace kvcast::kvcache::ac
