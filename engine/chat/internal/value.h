// Value: the dynamic value of the Jinja interpreter, modelled on the Python
// objects jinja2 works with (str, int, float, bool, None, list, tuple, dict,
// jinja2's Undefined, callables and namespaces), with Python's printing,
// equality, ordering and truthiness, and json.dumps serialization.
// Ints are unbounded as Python's: int64, or a BigInt where that is too
// small (numbers.h does their arithmetic and bounds their size).
//
// Lists, dicts and callables are shared by reference like Python objects
// (copying a Value copies a pointer); strings and numbers by value. Dicts keep
// insertion order. Strings hold UTF-8; lengths, indexing and slicing count
// code points as Python does.
// Thread safety: a Value is not synchronized; values built by one render are
// used only by that render's thread.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_VALUE_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/internal/bigint.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace jinja_internal {

class Interpreter;
class Value;

enum class ValueKind {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable,
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

struct ValueList {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;
  // namespace(...) objects and loop variables: attributes are assignable
  // (namespaces only) and they print as objects, not dicts.
  bool is_namespace = false;

  const Value* Find(const Value& key) const;
  const Value* FindString(absl::string_view key) const;
  void Set(Value key, Value value);
};

class Value {
 public:
  Value() = default;  // Undefined without a name.
  static Value Undefined(std::string hint) {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value None() { return Value(ValueKind::kNone); }
  static Value Bool(bool b) {
    Value v(ValueKind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(ValueKind::kInt);
    v.int_ = i;
    return v;
  }
  // An int of any size, held as int64 where it fits.
  static Value Int(const BigInt& i);
  static Value Float(double f) {
    Value v(ValueKind::kFloat);
    v.float_ = f;
    return v;
  }
  static Value String(std::string s) {
    Value v(ValueKind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(std::shared_ptr<ValueDict> dict);
  static Value NewDict() { return Dict(std::make_shared<ValueDict>()); }
  static Value Function(std::string name, NativeFunction fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  // An int beyond int64.
  bool is_big_int() const { return kind_ == ValueKind::kInt && object_ != nullptr; }
  // int or bool: Python's bool is an int.
  bool is_integral() const { return kind_ == ValueKind::kInt || kind_ == ValueKind::kBool; }
  bool is_number() const { return is_integral() || kind_ == ValueKind::kFloat; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_namespace() const { return is_dict() && dict_->is_namespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool bool_value() const { return int_ != 0; }
  // An int or bool; a big int saturates to INT64_MIN or INT64_MAX, as
  // Python clamps slice bounds (indexes that large find nothing either).
  int64_t int_value() const { return int_; }
  // An int or bool of any size.
  BigInt big_int_value() const { return is_big_int() ? big() : BigInt(int_); }
  // A number as a double; a big int rounded, or +-inf beyond the double
  // range (numbers.h's ToDouble fails there, as Python does).
  double number_value() const {
    return is_float() ? float_ : is_big_int() ? big().ToDouble() : static_cast<double>(int_);
  }
  const std::string& str() const { return str_; }  // String; or the hint of an undefined.
  std::vector<Value>& items() const { return list_->items; }
  bool is_tuple() const { return list_->is_tuple; }
  ValueDict& dict() const { return *dict_; }
  const Callable& callable() const { return *static_cast<const Callable*>(object_.get()); }

  // Python's bool(x). Undefined is false.
  bool Truthy() const;
  // Python's str(x); undefined prints as "".
  std::string ToString() const;
  // Python's repr(x).
  std::string Repr() const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // Python's <; TypeError-like InvalidArgument for unorderable types.
  absl::StatusOr<bool> Less(const Value& other) const;
  // Python type name, for messages: "str", "int", "list", "undefined", ...
  std::string TypeName() const;
  // Length as Python's len(): code points of a string, entries of a list or
  // dict, 0 for undefined; InvalidArgument otherwise.
  absl::StatusOr<int64_t> Length() const;
  // Iteration as Python's iter(): a string's characters, a list's items, a
  // dict's keys, nothing for undefined; InvalidArgument otherwise.
  absl::StatusOr<std::vector<Value>> Iterate() const;

  // json.dumps(x, ensure_ascii=False, indent=indent, separators=...,
  // sort_keys=...). indent < 0 means None; the separators default as Python's
  // do (", "/": " without indent, ","/": " with).
  struct JsonOptions {
    int indent = -1;
    std::string indent_string;  // When the indent argument was a string.
    bool indent_is_string = false;
    std::string item_separator;
    std::string key_separator;
    bool separators_given = false;
    bool sort_keys = false;
  };
  absl::Status DumpJson(const JsonOptions& options, std::string* out) const;
  // The value as JSON (for registered C++ functions); undefined and
  // callables become null, ints beyond int64 the nearest double.
  nlohmann::ordered_json ToJson() const;

 private:
  explicit Value(ValueKind kind) : kind_(kind) {}
  const BigInt& big() const { return *static_cast<const BigInt*>(object_.get()); }
  absl::Status DumpJsonAt(const JsonOptions& options, int depth, std::string* out) const;

  ValueKind kind_ = ValueKind::kUndefined;
  int64_t int_ = 0;  // Saturated for a big int.
  double float_ = 0;
  std::string str_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  // A callable's Callable, a big int's BigInt (one pointer for both keeps
  // every Value small).
  std::shared_ptr<const void> object_;
};

// Python's repr(float), e.g. 1.0, 0.1, 1e+16, 1.5e-07, inf, nan.
std::string FormatPythonFloat(double f);

// Code points of UTF-8 text (invalid bytes count as one code point each)
// and the byte offset of each, plus the end offset.
std::vector<size_t> CodePointOffsets(absl::string_view s);

void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_VALUE_H_
