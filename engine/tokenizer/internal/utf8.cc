#include "engine/tokenizer/internal/utf8.h"

#include <cstdint>

namespace kvcast {
namespace tokenizer_internal {
namespace {

// Length of the longest prefix of text[pos..] that could start a well-formed
// sequence (Unicode 3.9 table 3-7), and the length a complete one needs.
struct SequenceScan {
  size_t valid_prefix;
  size_t needed;
};

SequenceScan Scan(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return {1, 1};
  size_t needed;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 1};
  }
  size_t n = 1;
  while (n < needed && pos + n < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos + n]);
    const uint8_t min = n == 1 ? lo : 0x80;
    const uint8_t max = n == 1 ? hi : 0xBF;
    if (b < min || b > max) break;
    ++n;
  }
  return {n, needed};
}

}  // namespace

size_t ValidUtf8SequenceLength(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const SequenceScan s = Scan(text, pos);
  return s.valid_prefix == s.needed ? s.needed : 0;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = ValidUtf8SequenceLength(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const SequenceScan s = Scan(bytes, pos);
    if (s.valid_prefix == s.needed) {
      out.append(bytes.substr(pos, s.needed));
      pos += s.needed;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += s.valid_prefix == 0 ? 1 : s.valid_prefix;
    }
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<uint8_t>(text[*pos]);
  size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  if (*pos + n > text.size()) n = text.size() - *pos;
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < n; ++i) {
    cp = (cp << 6) | (static_cast<uint8_t>(text[*pos + i]) & 0x3F);
  }
  *pos += n;
  return cp;
}

}  // namespace tokenizer_internal
}  // namespace kvcast
