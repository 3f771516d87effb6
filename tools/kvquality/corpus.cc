// Corpus files and windows: see corpus.h.
#include "tools/kvquality/corpus.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kvcast::kvquality {

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
    text += s.str();
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

}  // namespace kvcast::kvquality
