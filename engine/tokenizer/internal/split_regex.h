// Pre-tokenization by regular expression, matching HF tokenizers' `Split`
// pre-tokenizer with behavior "Isolated" (and ByteLevel's use_regex split):
// every match becomes a piece, and so does every gap between matches.
// Runs on PCRE2 in UTF + UCP mode (JIT when available), whose backtracking
// semantics match the Oniguruma engine HF uses for these patterns.
//
// A compiled SplitRegex is immutable; Split() is const and thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_SPLIT_REGEX_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_SPLIT_REGEX_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcast {
namespace tokenizer_internal {

// GPT-2's pattern, used by ByteLevel{use_regex: true}.
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama-3's pattern (Qwen2's differs only in `\p{N}` instead of `\p{N}{1,3}`).
inline constexpr char kLlama3SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class SplitRegex {
 public:
  // InvalidArgument with PCRE2's message and offset when `pattern` does not
  // compile.
  static absl::StatusOr<std::unique_ptr<SplitRegex>> Compile(std::string_view pattern);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Appends the pieces of `text` (valid UTF-8, unchecked) to *pieces; the
  // pieces are views into `text` and concatenate back to it. Fails only on a
  // PCRE2 match error (e.g. resource limits).
  absl::Status Split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  explicit SplitRegex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*, kept opaque so pcre2.h stays out of headers.
};

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_SPLIT_REGEX_H_
