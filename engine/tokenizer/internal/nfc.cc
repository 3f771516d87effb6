#include "engine/tokenizer/internal/nfc.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/tokenizer/internal/utf8.h"

namespace kvcast {
namespace tokenizer_internal {
namespace {

struct NfcDecomposition {
  char32_t cp;
  uint32_t offset;
  uint32_t length;
};
struct NfcCombiningClass {
  char32_t first;
  char32_t last;
  uint8_t ccc;
};
struct NfcComposition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "engine/tokenizer/internal/nfc_tables.inc"

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Below this code point NFC is the identity: nothing decomposes into, or
// composes with, anything else.
constexpr char32_t kFirstAffected = 0x300;

uint8_t CombiningClass(char32_t cp) {
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::upper_bound(std::begin(kCombiningClasses), end, cp,
                                    [](char32_t c, const NfcCombiningClass& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const NfcDecomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  out->insert(out->end(), kDecompositionData + it->offset,
              kDecompositionData + it->offset + it->length);
}

// Returns the primary composite of (a, b), or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(
      std::begin(kCompositions), end, std::make_pair(a, b),
      [](const NfcComposition& c, const std::pair<char32_t, char32_t>& k) {
        return c.first != k.first ? c.first < k.first : c.second < k.second;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string ToNfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) {
    return std::string(text);  // Every code point is below U+0300.
  }
  std::vector<char32_t> cps;
  for (size_t pos = 0; pos < text.size();) {
    const char32_t cp = NextCodePoint(text, &pos);
    if (cp < kFirstAffected) {
      cps.push_back(cp);
    } else {
      Decompose(cp, &cps);
    }
  }
  // Canonical ordering: stable-sort each run of non-starters by class.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CombiningClass(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    std::vector<std::pair<uint8_t, char32_t>> run;
    for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], cps[k]);
    std::stable_sort(run.begin(), run.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = i; k < j; ++k) std::tie(ccc[k], cps[k]) = run[k - i];
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  std::vector<uint8_t> out_ccc;
  size_t starter = SIZE_MAX;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const uint8_t c = ccc[i];
    if (starter != SIZE_MAX) {
      const uint8_t last = out_ccc.back();
      const bool blocked = out.size() - 1 != starter && (last == 0 || last >= c);
      if (!blocked) {
        if (const char32_t composite = Compose(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    out.push_back(cp);
    out_ccc.push_back(c);
    if (c == 0) starter = out.size() - 1;
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t cp : out) AppendUtf8(cp, &result);
  return result;
}

}  // namespace tokenizer_internal
}  // namespace kvcast
