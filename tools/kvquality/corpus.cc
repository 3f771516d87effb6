// Corpus files and windows: see corpus.h.
#include "tools/kvquality/corpus.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kvcast::kvquality {
namespace {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF).
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kLeast[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// Latin-1 bytes as UTF-8.
std::string Latin1ToUtf8(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x80) {
      out += char(c);
    } else {
      out += char(0xc0 | (c >> 6));
      out += char(0x80 | (c & 0x3f));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadCorpus(const std::vector<std::string>& paths) {
  if (paths.empty()) return absl::InvalidArgumentError("corpus: no files");
  std::string text;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("corpus: cannot open ", path));
    std::ostringstream s;
    s << in.rdbuf();
    if (in.bad()) return absl::DataLossError(absl::StrCat("corpus: cannot read ", path));
    if (s.str().empty()) return absl::InvalidArgumentError(absl::StrCat("corpus: ", path, " is empty"));
    if (!text.empty()) text += '\n';
    text += ValidUtf8(s.str()) ? s.str() : Latin1ToUtf8(s.str());
  }
  return text;
}

absl::StatusOr<std::vector<absl::Span<const int32_t>>> Windows(absl::Span<const int32_t> tokens,
                                                               int len, int count) {
  if (len < 1 || count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("windows: ", count, " of ", len, " tokens"));
  }
  const size_t n = tokens.size();
  if (n < size_t(len) * count) {
    return absl::InvalidArgumentError(absl::StrCat("corpus: ", n, " tokens, fewer than ", count,
                                                   " windows of ", len, " need"));
  }
  // Starts i * (n - len) / (count - 1): at least len apart since n >= count * len.
  std::vector<absl::Span<const int32_t>> out;
  for (int i = 0; i < count; ++i) {
    const size_t start = count == 1 ? 0 : size_t(i) * (n - len) / (count - 1);
    out.push_back(tokens.subspan(start, len));
  }
  return out;
}

absl::StatusOr<std::vector<absl::Span<const int32_t>>> HalfOverlappingWindows(
    absl::Span<const int32_t> tokens, int len) {
  if (len < 2 || tokens.size() < size_t(len)) {
    return absl::InvalidArgumentError(
        absl::StrCat("corpus: ", tokens.size(), " tokens for windows of ", len));
  }
  std::vector<absl::Span<const int32_t>> out;
  for (size_t start = 0; start + len <= tokens.size(); start += len / 2) {
    out.push_back(tokens.subspan(start, len));
  }
  return out;
}

}  // namespace kvcast::kvquality
