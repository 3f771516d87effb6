#include "services/common/api_keys.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvcast::services {
namespace {

// Equality in time that depends only on the lengths.
bool SameKey(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read API keys file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text, const std::string& origin) {
  ApiKeys keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_no, ": ", why));
    };
    if (fields.size() != 2) return bad("expected `KEY TENANT`");
    const absl::string_view key = fields[0];
    if (key.size() < 16) return bad("keys must be at least 16 characters");
    for (char c : key) {
      if (c < 0x21 || c > 0x7e) return bad("keys must be printable ASCII");
    }
    for (const auto& [k, t] : keys.keys_) {
      if (k == key) return bad("this key is listed twice");
    }
    keys.keys_.emplace_back(std::string(key), std::string(fields[1]));
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": no API keys"));
  }
  return keys;
}

std::optional<std::string> ApiKeys::TenantOf(absl::string_view authorization) const {
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.size() < 7 || !absl::StartsWithIgnoreCase(authorization, "bearer ")) {
    return std::nullopt;
  }
  const absl::string_view key = absl::StripLeadingAsciiWhitespace(authorization.substr(7));
  std::optional<std::string> tenant;
  for (const auto& [k, t] : keys_) {
    if (SameKey(k, key)) tenant = t;  // no early exit: time does not tell which key matched
  }
  return tenant;
}

}  // namespace kvcast::services
