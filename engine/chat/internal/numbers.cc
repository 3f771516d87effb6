#include "engine/chat/internal/numbers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast {
namespace jinja_internal {
namespace {

absl::Status TooLarge() {
  return absl::ResourceExhaustedError(absl::StrCat("integer longer than ", kMaxIntBits, " bits"));
}

bool IsZero(const Value& v) { return v.is_float() ? v.number_value() == 0 : v.int_value() == 0; }

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python's float a op b; y is not 0 for / // %.
absl::StatusOr<Value> FloatArithmetic(absl::string_view op, double x, double y) {
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") return Value::Float(x / y);
  if (op == "**") {
    if (x == 0 && y < 0) return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(x, y));
  }
  // CPython's float_divmod.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) {
    mod += y;
    div -= 1.0;
  }
  if (op == "%") return Value::Float(mod != 0 ? mod : std::copysign(0.0, y));
  double floordiv = std::copysign(0.0, x / y);
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  }
  return Value::Float(floordiv);
}

// The int64 fast path of int a op b; nullopt where the result or a step
// toward it leaves int64 (or, for /, an operand has more than 53 bits).
std::optional<Value> SmallArithmetic(absl::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? std::nullopt : std::optional<Value>(Value::Int(r));
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? std::nullopt : std::optional<Value>(Value::Int(r));
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? std::nullopt : std::optional<Value>(Value::Int(r));
  if (op == "/") {
    constexpr int64_t kExact = int64_t{1} << 53;  // Exact as doubles: one rounding.
    if (x < -kExact || x > kExact || y < -kExact || y > kExact) return std::nullopt;
    return Value::Float(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (x == INT64_MIN && y == -1) return std::nullopt;
    return Value::Int(op == "//" ? FloorDiv(x, y) : FloorMod(x, y));
  }
  if (op == "**") {  // y >= 0.
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return std::nullopt;
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return std::nullopt;
    }
    return Value::Int(result);
  }
  return std::nullopt;
}

absl::StatusOr<Value> BigArithmetic(absl::string_view op, const BigInt& a, const BigInt& b) {
  if (op == "+") return MakeInt(a + b);
  if (op == "-") return MakeInt(a - b);
  if (op == "*") return MakeInt(a * b);
  if (op == "/") {
    const double q = BigInt::Divide(a, b);
    if (std::isinf(q)) return absl::InvalidArgumentError("integer division result too large for a float");
    return Value::Float(q);
  }
  if (op == "//" || op == "%") {
    BigInt q, r;
    BigInt::DivMod(a, b, &q, &r);
    return MakeInt(op == "//" ? q : r);
  }
  if (op == "**") {  // b >= 0.
    if (a.BitLength() <= 1) {  // 0, 1 or -1.
      if (b.is_zero()) return Value::Int(1);
      return Value::Int(a.negative() && !b.is_odd() ? 1 : *a.ToInt64());
    }
    // |a| >= 2: a ** b has more than (bits(a) - 1) * b bits.
    const std::optional<int64_t> e = b.ToInt64();
    if (!e || *e >= kMaxIntBits || (a.BitLength() - 1) * *e >= kMaxIntBits) return TooLarge();
    return MakeInt(a.Pow(static_cast<uint64_t>(*e)));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported operator ", op));
}

// n / d to the nearest integer, ties to even; d > 0.
BigInt RoundHalfEven(const BigInt& n, const BigInt& d) {
  BigInt q, r;
  BigInt::DivMod(n, d, &q, &r);
  const int c = Compare(r + r, d);
  return c > 0 || (c == 0 && q.is_odd()) ? q + BigInt(1) : q;
}

BigInt PowerOf(int64_t base, int64_t exponent) { return BigInt(base).Pow(static_cast<uint64_t>(exponent)); }

}  // namespace

absl::StatusOr<Value> MakeInt(const BigInt& i) {
  if (i.BitLength() > kMaxIntBits) return TooLarge();
  return Value::Int(i);
}

absl::StatusOr<BigInt> ParseIntDigits(absl::string_view digits, int base) {
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [&](char c) { return DigitValue(c) < base; })) {
    return absl::InvalidArgumentError(absl::StrCat("invalid literal for int() with base ", base, ": '", digits, "'"));
  }
  // n significant digits are at least base^(n - 1) >= 2^((n - 1) * floor(log2(base))).
  const size_t first = digits.find_first_not_of('0');
  const int64_t significant = first == absl::string_view::npos ? 0 : static_cast<int64_t>(digits.size() - first);
  const int bits_per_digit = 31 - __builtin_clz(static_cast<unsigned>(base));
  if (significant > 1 && (significant - 1) * bits_per_digit >= kMaxIntBits) return TooLarge();
  BigInt i = *BigInt::FromDigits(digits, base);
  if (i.BitLength() > kMaxIntBits) return TooLarge();
  return i;
}

absl::StatusOr<Value> TruncateToInt(const Value& number) {
  if (!number.is_float()) return number.is_bool() ? Value::Int(number.int_value()) : number;
  const double f = number.number_value();
  if (std::isnan(f)) return absl::InvalidArgumentError("cannot convert float NaN to integer");
  if (std::isinf(f)) return absl::InvalidArgumentError("cannot convert float infinity to integer");
  if (std::fabs(f) < 9223372036854775808.0) return Value::Int(static_cast<int64_t>(f));
  return MakeInt(BigInt::FromDouble(f));
}

absl::StatusOr<double> ToDouble(const Value& number) {
  if (!number.is_big_int()) return number.number_value();
  const double d = number.big_int_value().ToDouble();
  if (std::isinf(d)) return absl::InvalidArgumentError("int too large to convert to float");
  return d;
}

absl::StatusOr<Value> Arithmetic(absl::string_view op, const Value& a, const Value& b) {
  if ((op == "/" || op == "//" || op == "%") && IsZero(b)) {
    return absl::InvalidArgumentError(op == "/"    ? "division by zero"
                                      : op == "//" ? "integer division or modulo by zero"
                                                   : "modulo by zero");
  }
  // An int to a negative int power is a float, as in Python.
  if (a.is_float() || b.is_float() || (op == "**" && b.int_value() < 0)) {
    ASSIGN_OR_RETURN(double x, ToDouble(a));
    ASSIGN_OR_RETURN(double y, ToDouble(b));
    return FloatArithmetic(op, x, y);
  }
  if (!a.is_big_int() && !b.is_big_int()) {
    std::optional<Value> r = SmallArithmetic(op, a.int_value(), b.int_value());
    if (r.has_value()) return *std::move(r);
  }
  return BigArithmetic(op, a.big_int_value(), b.big_int_value());
}

absl::StatusOr<Value> Negate(const Value& number) {
  if (number.is_float()) return Value::Float(-number.number_value());
  if (!number.is_big_int() && number.int_value() != INT64_MIN) return Value::Int(-number.int_value());
  return MakeInt(-number.big_int_value());
}

absl::StatusOr<Value> Absolute(const Value& number) {
  if (number.is_float()) return Value::Float(std::fabs(number.number_value()));
  if (!number.is_big_int() && number.int_value() != INT64_MIN) return Value::Int(std::llabs(number.int_value()));
  return MakeInt(number.big_int_value().Abs());
}

absl::StatusOr<Value> Round(const Value& number, int64_t ndigits) {
  if (!number.is_float()) {
    if (ndigits >= 0) return TruncateToInt(number);
    if (ndigits < -kMaxIntBits) return Value::Int(0);  // 10^-ndigits is over twice any int.
    const BigInt unit = PowerOf(10, -ndigits);
    return MakeInt(RoundHalfEven(number.big_int_value(), unit) * unit);
  }
  // CPython's float.__round__: beyond 323 digits a double is its own
  // rounding, and below -308 it rounds to 0; else exactly, as here.
  const double x = number.number_value();
  if (!std::isfinite(x) || x == 0 || ndigits > 323) return number;
  if (ndigits < -308) return Value::Float(0.0 * x);
  int exponent = 0;
  const double fraction = std::frexp(x, &exponent);
  const BigInt mantissa = BigInt::FromDouble(std::ldexp(fraction, 53));  // x = mantissa * 2^e, exactly.
  const int64_t e = exponent - 53;
  // x * 10^ndigits = num / den, rounded to an integer.
  const BigInt num = mantissa * PowerOf(10, std::max<int64_t>(ndigits, 0)) * PowerOf(2, std::max<int64_t>(e, 0));
  const BigInt den = PowerOf(10, std::max<int64_t>(-ndigits, 0)) * PowerOf(2, std::max<int64_t>(-e, 0));
  const BigInt scaled = RoundHalfEven(num, den);
  const double r = ndigits >= 0 ? BigInt::Divide(scaled, PowerOf(10, ndigits))
                                : (scaled * PowerOf(10, -ndigits)).ToDouble();
  if (std::isinf(r)) return absl::InvalidArgumentError("rounded value too large to represent");
  return Value::Float(r == 0 ? std::copysign(0.0, x) : r);
}

}  // namespace jinja_internal
}  // namespace kvcast
