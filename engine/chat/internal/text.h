// Python str operations on UTF-8 text for the Jinja builtins: case mapping
// (ASCII, Latin-1, Greek and Cyrillic letters; other scripts unchanged),
// whitespace as str.isspace, strip/split/replace/title as Python's.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_TEXT_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_TEXT_H_

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvcast {
namespace jinja_internal {

std::vector<uint32_t> DecodeUtf8(absl::string_view s);
std::string EncodeUtf8(const std::vector<uint32_t>& cps);

bool IsPySpace(uint32_t cp);
uint32_t ToLowerCp(uint32_t cp);
uint32_t ToUpperCp(uint32_t cp);
bool IsCased(uint32_t cp);  // Has an upper or lower case form.

std::string PyLower(absl::string_view s);
std::string PyUpper(absl::string_view s);
std::string PyCapitalize(absl::string_view s);
std::string PyTitle(absl::string_view s);  // str.title()
std::string JinjaTitle(absl::string_view s);  // jinja2's |title filter
// str.strip(chars): which = 1 left, 2 right, 3 both; chars null means
// whitespace.
std::string PyStrip(absl::string_view s, const std::string* chars, int which);
// str.split(sep, maxsplit); sep null splits on whitespace runs.
std::vector<std::string> PySplit(absl::string_view s, const std::string* sep, int64_t maxsplit);
// str.rsplit: as PySplit, splitting from the right.
std::vector<std::string> PyRSplit(absl::string_view s, const std::string* sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 means all.
std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view replacement, int64_t count);
// datetime.strftime(format) of a naive datetime (as transformers'
// strftime_now passes): %z and %Z are empty, %f the microseconds (6
// digits); the rest is C's strftime, as Python's is.
std::string PyStrftime(const std::string& format, const std::tm& time, int microseconds);
// str.splitlines() (\n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028/9).
std::vector<std::string> PySplitLines(absl::string_view s);
// Non-ASCII code points as \uXXXX (surrogate pairs above U+FFFF), as
// json.dumps(ensure_ascii=True).
std::string AsciiEscape(absl::string_view s);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_TEXT_H_
