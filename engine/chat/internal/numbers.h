// Python's int and float arithmetic on Values: ints are exact at any size,
// as Python's (int64 in a Value, a BigInt beyond), floats are doubles, and
// an int meets a float as Python has them meet (converted to float, where
// an int beyond the double range is an error).
//
// Ints are bounded so that a template cannot exhaust the machine: one of
// more than kMaxIntBits bits (1233 decimal digits; Python has no such
// limit) is a ResourceExhausted error, found before the work for powers
// and literals. Other errors are InvalidArgument with Python's message and
// no line; callers add the line.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_NUMBERS_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_NUMBERS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/internal/bigint.h"
#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {

inline constexpr int64_t kMaxIntBits = 4096;

// An int of `i`; ResourceExhausted beyond kMaxIntBits.
absl::StatusOr<Value> MakeInt(const BigInt& i);
// The digits of an int in `base` (2 to 36; no sign, prefix or '_'):
// InvalidArgument when they are not, ResourceExhausted beyond kMaxIntBits.
absl::StatusOr<BigInt> ParseIntDigits(absl::string_view digits, int base);

// Python's int(x) of a number: ints as they are (bools as 0 and 1), a
// float's integer part; an error for inf and nan.
absl::StatusOr<Value> TruncateToInt(const Value& number);
// Python's float(x) of a number: an error for an int beyond the double range.
absl::StatusOr<double> ToDouble(const Value& number);

// Python's a op b of two numbers (ints, bools or floats) for op one of
// + - * / // % **.
absl::StatusOr<Value> Arithmetic(absl::string_view op, const Value& a, const Value& b);
// Python's -x and abs(x) of a number.
absl::StatusOr<Value> Negate(const Value& number);
absl::StatusOr<Value> Absolute(const Value& number);
// Python's round(x, ndigits) of a number, half to even: an int for an int,
// a float for a float.
absl::StatusOr<Value> Round(const Value& number, int64_t ndigits);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_NUMBERS_H_
