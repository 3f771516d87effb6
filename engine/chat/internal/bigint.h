// BigInt: a signed integer of any size, for the renderer's Python ints
// beyond int64 (see numbers.h, which bounds their size). The magnitude is
// kept as little-endian 32-bit limbs without high zero limbs, and a sign;
// zero has no limbs and is never negative. A plain value type with no
// size limit of its own.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_BIGINT_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_BIGINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvcast {
namespace jinja_internal {

// The value of a digit 0-9, a-z or A-Z (10 to 35); 99 for any other character.
int DigitValue(char c);

class BigInt {
 public:
  BigInt() = default;  // 0
  explicit BigInt(int64_t v);
  // The digits of a number in `base` (2 to 36, letters in either case) and
  // nothing else: no sign, prefix or '_'; nullopt when there are none or a
  // character is not such a digit.
  static std::optional<BigInt> FromDigits(absl::string_view digits, int base);
  // The integer part of a finite double, exactly (Python's int(f)).
  static BigInt FromDouble(double d);

  bool is_zero() const { return mag_.empty(); }
  bool negative() const { return negative_; }
  bool is_odd() const { return !mag_.empty() && (mag_[0] & 1) != 0; }
  // Bits of |x|: 0 for 0, 1 for 1, 64 for 2^63.
  int64_t BitLength() const;
  std::optional<int64_t> ToInt64() const;
  // The digits in `base` (2 to 36, lower case), after a '-' when negative.
  std::string ToString(int base = 10) const;
  // The nearest double, ties to even; +-inf beyond the double range.
  double ToDouble() const;
  // a / b rounded once to the nearest double, ties to even (Python's true
  // division of ints); +-inf beyond the double range. b must not be 0.
  static double Divide(const BigInt& a, const BigInt& b);
  // How x compares with a double that is not NaN, exactly: -1, 0 or 1.
  int CompareToDouble(double d) const;

  BigInt operator-() const;
  BigInt Abs() const;
  friend BigInt operator+(const BigInt& a, const BigInt& b);
  friend BigInt operator-(const BigInt& a, const BigInt& b);
  friend BigInt operator*(const BigInt& a, const BigInt& b);
  // Python's divmod: q = floor(a / b) and r = a - q * b, which is 0 or has
  // b's sign. b must not be 0.
  static void DivMod(const BigInt& a, const BigInt& b, BigInt* q, BigInt* r);
  BigInt Pow(uint64_t exponent) const;
  // -1, 0 or 1 as a < b, a == b, a > b.
  friend int Compare(const BigInt& a, const BigInt& b);
  friend bool operator==(const BigInt& a, const BigInt& b) { return Compare(a, b) == 0; }
  friend bool operator!=(const BigInt& a, const BigInt& b) { return Compare(a, b) != 0; }

 private:
  using Limbs = std::vector<uint32_t>;
  BigInt(Limbs mag, bool negative);

  Limbs mag_;
  bool negative_ = false;
};

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_BIGINT_H_
