// The evaluation text: files read as they are, tokenized once, cut into
// windows of consecutive tokens (llama.cpp's perplexity method: each
// window's first part is context, its second part is scored).
//
// Pure functions apart from reading files; thread-safe.
#ifndef KVCAST_TOOLS_KVQUALITY_CORPUS_H_
#define KVCAST_TOOLS_KVQUALITY_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvcast::kvquality {

// The files' text, in order, joined by one newline: a file's bytes as they
// are when they are UTF-8, else read as Latin-1 (lee.cor's pound signs are
// the byte 0xa3) and given as UTF-8. NotFound / an I/O
// error naming the file that could not be read; InvalidArgument for an
// empty list or an empty file.
absl::StatusOr<std::string> ReadCorpus(const std::vector<std::string>& paths);

// `count` windows of `len` consecutive tokens, not overlapping, spread
// evenly over `tokens` (the first at token 0, the last ending at most at
// the end). InvalidArgument naming both sizes when `tokens` holds fewer
// than count * len tokens, or for count or len < 1.
absl::StatusOr<std::vector<absl::Span<const int32_t>>> Windows(absl::Span<const int32_t> tokens,
                                                               int len, int count);

// Every window of `len` tokens that starts at a multiple of len / 2 (at
// least 1) and ends within `tokens`: half-overlapping windows, as a
// calibration cuts a short text (each token then seen in two contexts).
// InvalidArgument when `tokens` holds fewer than len tokens or len < 2.
absl::StatusOr<std::vector<absl::Span<const int32_t>>> HalfOverlappingWindows(
    absl::Span<const int32_t> tokens, int len);

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_CORPUS_H_
