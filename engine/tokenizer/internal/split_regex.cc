#include "engine/tokenizer/internal/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace kvcast {
namespace tokenizer_internal {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return absl::StrCat("error ", code);
  return reinterpret_cast<const char*>(buf);
}

// Frees match data on every exit path.
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex pattern \"", std::string(pattern),
                                                   "\" does not compile at offset ", offset,
                                                   ": ", Pcre2Message(error)));
  }
  // JIT is an optimization only; the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<SplitRegex>(new SplitRegex(code));
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status SplitRegex::Split(std::string_view text,
                               std::vector<std::string_view>* pieces) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(code, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                               match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("regex match: ", Pcre2Message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    const size_t start = ov[0], end = ov[1];
    if (start > gap_start) pieces->push_back(text.substr(gap_start, start - gap_start));
    if (end > start) {
      pieces->push_back(text.substr(start, end - start));
      gap_start = pos = end;
      continue;
    }
    // An empty match contributes no piece; step past one code point.
    gap_start = start;
    if (start >= text.size()) break;
    pos = start + 1;
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  }
  if (gap_start < text.size()) pieces->push_back(text.substr(gap_start));
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace kvcast
