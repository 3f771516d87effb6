#include "engine/chat/internal/bigint.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvcast {
namespace jinja_internal {
namespace {

// Magnitudes: little-endian 32-bit limbs, no high zero limbs.
using Limbs = std::vector<uint32_t>;
constexpr uint64_t kLimbBase = uint64_t{1} << 32;

void Trim(Limbs* a) {
  while (!a->empty() && a->back() == 0) a->pop_back();
}

Limbs FromUint64(uint64_t u) {
  Limbs a = {static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32)};
  Trim(&a);
  return a;
}

int CompareMag(const Limbs& a, const Limbs& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

Limbs AddMag(const Limbs& a, const Limbs& b) {
  const Limbs& longer = a.size() >= b.size() ? a : b;
  const Limbs& shorter = a.size() >= b.size() ? b : a;
  Limbs out(longer.size() + 1);
  uint64_t carry = 0;
  for (size_t i = 0; i < longer.size(); ++i) {
    const uint64_t sum = uint64_t{longer[i]} + (i < shorter.size() ? shorter[i] : 0) + carry;
    out[i] = static_cast<uint32_t>(sum);
    carry = sum >> 32;
  }
  out[longer.size()] = static_cast<uint32_t>(carry);
  Trim(&out);
  return out;
}

// a - b for a >= b.
Limbs SubMag(const Limbs& a, const Limbs& b) {
  Limbs out(a.size());
  uint64_t borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t diff = uint64_t{a[i]} - (i < b.size() ? b[i] : 0) - borrow;  // Wraps when negative.
    out[i] = static_cast<uint32_t>(diff);
    borrow = diff >> 63;
  }
  Trim(&out);
  return out;
}

Limbs MulMag(const Limbs& a, const Limbs& b) {
  if (a.empty() || b.empty()) return {};
  Limbs out(a.size() + b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint64_t carry = 0;
    for (size_t j = 0; j < b.size(); ++j) {
      const uint64_t t = uint64_t{a[i]} * b[j] + out[i + j] + carry;  // At most 2^64 - 1.
      out[i + j] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    out[i + b.size()] = static_cast<uint32_t>(carry);
  }
  Trim(&out);
  return out;
}

// a = a * m + add.
void MulAddSmall(Limbs* a, uint32_t m, uint32_t add) {
  uint64_t carry = add;
  for (uint32_t& limb : *a) {
    const uint64_t t = uint64_t{limb} * m + carry;
    limb = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  if (carry != 0) a->push_back(static_cast<uint32_t>(carry));
}

// a = a / d; returns a % d.
uint32_t DivSmall(Limbs* a, uint32_t d) {
  uint64_t rem = 0;
  for (size_t i = a->size(); i-- > 0;) {
    const uint64_t cur = (rem << 32) | (*a)[i];
    (*a)[i] = static_cast<uint32_t>(cur / d);
    rem = cur % d;
  }
  Trim(a);
  return static_cast<uint32_t>(rem);
}

Limbs ShiftLeftMag(const Limbs& a, uint64_t bits) {
  if (a.empty()) return {};
  const size_t limbs = bits / 32;
  const int s = static_cast<int>(bits % 32);
  Limbs out(limbs + a.size() + 1);
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t v = uint64_t{a[i]} << s;
    out[limbs + i] |= static_cast<uint32_t>(v);
    out[limbs + i + 1] |= static_cast<uint32_t>(v >> 32);
  }
  Trim(&out);
  return out;
}

// a >> s for 0 <= s < 32.
Limbs ShiftRightBits(const Limbs& a, int s) {
  Limbs out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t pair = a[i] | (i + 1 < a.size() ? uint64_t{a[i + 1]} << 32 : 0);
    out[i] = static_cast<uint32_t>(pair >> s);
  }
  Trim(&out);
  return out;
}

// u = q * v + r with 0 <= r < v; v is not zero. Knuth's algorithm D: each
// quotient limb is estimated from the top limbs of the remainder and of the
// divisor, shifted so its top bit is set (the estimate is then at most 2
// too large), and corrected.
void DivModMag(const Limbs& u, const Limbs& v, Limbs* q, Limbs* r) {
  if (CompareMag(u, v) < 0) {
    q->clear();
    *r = u;
    return;
  }
  if (v.size() == 1) {
    *q = u;
    const uint32_t rem = DivSmall(q, v[0]);
    *r = rem != 0 ? Limbs{rem} : Limbs{};
    return;
  }
  const int s = __builtin_clz(v.back());
  const Limbs vn = ShiftLeftMag(v, s);
  Limbs un = ShiftLeftMag(u, s);
  un.resize(u.size() + 1);
  const size_t n = vn.size();
  const size_t m = u.size() - n;
  q->assign(m + 1, 0);
  for (size_t j = m + 1; j-- > 0;) {
    const uint64_t top = (uint64_t{un[j + n]} << 32) | un[j + n - 1];
    uint64_t qhat = top / vn[n - 1];
    uint64_t rhat = top % vn[n - 1];
    while (qhat >= kLimbBase || qhat * vn[n - 2] > ((rhat << 32) | un[j + n - 2])) {
      --qhat;
      rhat += vn[n - 1];
      if (rhat >= kLimbBase) break;
    }
    // un[j .. j + n] -= qhat * vn.
    uint64_t carry = 0;
    int64_t borrow = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t p = qhat * vn[i] + carry;
      carry = p >> 32;
      const int64_t t = int64_t{un[i + j]} - borrow - static_cast<int64_t>(p & 0xFFFFFFFFu);
      un[i + j] = static_cast<uint32_t>(t);
      borrow = t < 0 ? 1 : 0;
    }
    const int64_t t = int64_t{un[j + n]} - borrow - static_cast<int64_t>(carry);
    un[j + n] = static_cast<uint32_t>(t);
    if (t < 0) {  // qhat was one too large: add vn back.
      --qhat;
      uint64_t c = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t sum = uint64_t{un[i + j]} + vn[i] + c;
        un[i + j] = static_cast<uint32_t>(sum);
        c = sum >> 32;
      }
      un[j + n] += static_cast<uint32_t>(c);
    }
    (*q)[j] = static_cast<uint32_t>(qhat);
  }
  Trim(q);
  un.resize(n);
  *r = ShiftRightBits(un, s);
}

// The largest power of `base` below 2^32 and its exponent: how many digits
// one limb operation takes.
std::pair<uint32_t, int> DigitChunk(int base) {
  uint32_t chunk = static_cast<uint32_t>(base);
  int digits = 1;
  while (uint64_t{chunk} * base < kLimbBase) {
    chunk *= base;
    ++digits;
  }
  return {chunk, digits};
}

}  // namespace

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  const char lower = static_cast<char>(c | 0x20);
  if (lower >= 'a' && lower <= 'z') return lower - 'a' + 10;
  return 99;
}

BigInt::BigInt(Limbs mag, bool negative) : mag_(std::move(mag)) {
  Trim(&mag_);
  negative_ = negative && !mag_.empty();
}

BigInt::BigInt(int64_t v)
    : BigInt(FromUint64(v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v)), v < 0) {}

std::optional<BigInt> BigInt::FromDigits(absl::string_view digits, int base) {
  if (digits.empty()) return std::nullopt;
  const auto [chunk, chunk_digits] = DigitChunk(base);
  Limbs mag;
  uint32_t value = 0, scale = 1;
  int pending = 0;
  for (char c : digits) {
    const int d = DigitValue(c);
    if (d >= base) return std::nullopt;
    value = value * base + d;
    scale *= base;
    if (++pending == chunk_digits) {
      MulAddSmall(&mag, chunk, value);
      value = 0;
      scale = 1;
      pending = 0;
    }
  }
  if (pending > 0) MulAddSmall(&mag, scale, value);
  return BigInt(std::move(mag), false);
}

BigInt BigInt::FromDouble(double d) {
  const double whole = std::trunc(std::fabs(d));
  if (whole < 18446744073709551616.0) return BigInt(FromUint64(static_cast<uint64_t>(whole)), d < 0);
  int exponent = 0;
  const double fraction = std::frexp(whole, &exponent);  // whole = fraction * 2^exponent, exactly.
  const uint64_t mantissa = static_cast<uint64_t>(std::ldexp(fraction, 53));
  return BigInt(ShiftLeftMag(FromUint64(mantissa), exponent - 53), d < 0);
}

int64_t BigInt::BitLength() const {
  if (mag_.empty()) return 0;
  return static_cast<int64_t>(mag_.size() - 1) * 32 + (32 - __builtin_clz(mag_.back()));
}

std::optional<int64_t> BigInt::ToInt64() const {
  if (mag_.size() > 2) return std::nullopt;
  const uint64_t u = (mag_.size() > 0 ? mag_[0] : 0) | (mag_.size() > 1 ? uint64_t{mag_[1]} << 32 : 0);
  if (!negative_) {
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (u > uint64_t{1} << 63) return std::nullopt;
  return static_cast<int64_t>(0 - u);
}

std::string BigInt::ToString(int base) const {
  if (mag_.empty()) return "0";
  const auto [chunk, chunk_digits] = DigitChunk(base);
  std::string out;  // Least significant digit first.
  Limbs rest = mag_;
  while (!rest.empty()) {
    uint32_t part = DivSmall(&rest, chunk);
    // A chunk below the top one has all its digits, leading zeros too.
    for (int i = 0; i < chunk_digits && (part != 0 || !rest.empty()); ++i) {
      out.push_back("0123456789abcdefghijklmnopqrstuvwxyz"[part % base]);
      part /= base;
    }
  }
  if (negative_) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

double BigInt::ToDouble() const { return Divide(*this, BigInt(1)); }

double BigInt::Divide(const BigInt& a, const BigInt& b) {
  const double sign = a.negative_ != b.negative_ ? -1.0 : 1.0;
  if (a.is_zero()) return sign * 0.0;
  // e with 2^e <= |a / b| < 2^(e + 1).
  int64_t e = a.BitLength() - b.BitLength();
  if (CompareMag(e < 0 ? ShiftLeftMag(a.mag_, -e) : a.mag_, e > 0 ? ShiftLeftMag(b.mag_, e) : b.mag_) < 0) --e;
  if (e > 1023) return sign * HUGE_VAL;
  // The result's last place is 2^ulp: 53 bits for a normal double, fewer
  // for a subnormal one. q = floor(|a / b| * 2^(2 - ulp)) has two more bits.
  const int64_t ulp = std::max<int64_t>(e - 52, -1074);
  const int64_t shift = 2 - ulp;
  Limbs q, r;
  DivModMag(shift > 0 ? ShiftLeftMag(a.mag_, shift) : a.mag_, shift < 0 ? ShiftLeftMag(b.mag_, -shift) : b.mag_,
            &q, &r);
  const uint64_t bits = (q.size() > 0 ? q[0] : 0) | (q.size() > 1 ? uint64_t{q[1]} << 32 : 0);  // < 2^55
  uint64_t mantissa = bits >> 2;
  const bool half = (bits & 2) != 0;
  const bool above_half = (bits & 1) != 0 || !r.empty();
  if (half && (above_half || (mantissa & 1) != 0)) ++mantissa;  // Ties to even.
  return sign * std::ldexp(static_cast<double>(mantissa), static_cast<int>(ulp));
}

int BigInt::CompareToDouble(double d) const {
  if (std::isinf(d)) return d > 0 ? -1 : 1;
  const double whole = std::trunc(d);
  const int c = Compare(*this, FromDouble(whole));
  if (c != 0) return c;
  const double fraction = d - whole;  // Exact.
  return fraction > 0 ? -1 : fraction < 0 ? 1 : 0;
}

BigInt BigInt::operator-() const { return BigInt(mag_, !negative_); }

BigInt BigInt::Abs() const { return BigInt(mag_, false); }

BigInt operator+(const BigInt& a, const BigInt& b) {
  if (a.negative_ == b.negative_) return BigInt(AddMag(a.mag_, b.mag_), a.negative_);
  if (CompareMag(a.mag_, b.mag_) >= 0) return BigInt(SubMag(a.mag_, b.mag_), a.negative_);
  return BigInt(SubMag(b.mag_, a.mag_), b.negative_);
}

BigInt operator-(const BigInt& a, const BigInt& b) { return a + (-b); }

BigInt operator*(const BigInt& a, const BigInt& b) {
  return BigInt(MulMag(a.mag_, b.mag_), a.negative_ != b.negative_);
}

void BigInt::DivMod(const BigInt& a, const BigInt& b, BigInt* q, BigInt* r) {
  Limbs qm, rm;
  DivModMag(a.mag_, b.mag_, &qm, &rm);
  // Truncated toward zero, then floored: a remainder of the other sign
  // than b moves the quotient down by one.
  BigInt quotient(std::move(qm), a.negative_ != b.negative_);
  BigInt remainder(std::move(rm), a.negative_);
  if (!remainder.is_zero() && remainder.negative_ != b.negative_) {
    quotient = quotient - BigInt(1);
    remainder = remainder + b;
  }
  *q = std::move(quotient);
  *r = std::move(remainder);
}

BigInt BigInt::Pow(uint64_t exponent) const {
  BigInt result(1);
  BigInt base = *this;
  while (exponent != 0) {
    if (exponent & 1) result = result * base;
    exponent >>= 1;
    if (exponent != 0) base = base * base;
  }
  return result;
}

int Compare(const BigInt& a, const BigInt& b) {
  if (a.negative_ != b.negative_) return a.negative_ ? -1 : 1;
  const int c = CompareMag(a.mag_, b.mag_);
  return a.negative_ ? -c : c;
}

}  // namespace jinja_internal
}  // namespace kvcast
