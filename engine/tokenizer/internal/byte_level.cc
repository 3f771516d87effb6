#include "engine/tokenizer/internal/byte_level.h"

#include "engine/tokenizer/internal/utf8.h"

namespace kvcast {
namespace tokenizer_internal {
namespace {

bool IsPrintableByte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint8_t, 256> order;
  std::array<char32_t, 256> byte_to_cp;
  std::array<int16_t, 512> cp_to_byte;  // -1 where not in the alphabet.
  std::array<std::string, 256> byte_to_utf8;
};

Tables BuildTables() {
  Tables t;
  t.cp_to_byte.fill(-1);
  int n = 0, next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    if (IsPrintableByte(b)) t.order[n++] = static_cast<uint8_t>(b);
  }
  for (int b = 0; b < 256; ++b) {
    if (!IsPrintableByte(b)) t.order[n++] = static_cast<uint8_t>(b);
  }
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = IsPrintableByte(b) ? b : 256 + next_extra++;
    t.byte_to_cp[b] = cp;
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
    AppendUtf8(cp, &t.byte_to_utf8[b]);
  }
  return t;
}

const Tables& GetTables() {
  static const Tables* tables = new Tables(BuildTables());
  return *tables;
}

}  // namespace

const std::array<uint8_t, 256>& Gpt2ByteOrder() { return GetTables().order; }

std::string BytesToByteLevel(std::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

bool ByteLevelToBytes(std::string_view token, std::string* out) {
  const Tables& t = GetTables();
  for (size_t pos = 0; pos < token.size();) {
    if (ValidUtf8SequenceLength(token, pos) == 0) return false;
    const char32_t cp = NextCodePoint(token, &pos);
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return true;
}

}  // namespace tokenizer_internal
}  // namespace kvcast
