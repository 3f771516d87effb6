#include "services/scheduler/text_stream.h"

#include <algorithm>
#include <utility>

namespace kvcast::scheduler {

TextStream::TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops)
    : decoder_(tokenizer, /*skip_special=*/true), stops_(std::move(stops)) {}

TextStream::Piece TextStream::Push(int32_t token, bool may_stop, bool last) {
  Piece piece;
  text_ += decoder_.Push(token);
  if (last) text_ += decoder_.Flush();
  size_t end = text_.size();
  // The earliest stop string that ends in the text not yet emitted (the
  // emitted text never ends in the start of one: it was held back), so
  // the cost per token is the new text plus the stops' lengths. One that
  // lies wholly in emitted text came before min_tokens: it does not count.
  size_t found = std::string::npos;
  if (may_stop) {
    for (const std::string& s : stops_) {
      if (s.empty()) continue;
      const size_t from = emitted_ >= s.size() ? emitted_ - s.size() + 1 : 0;
      const size_t p = text_.find(s, from);
      if (p != std::string::npos && p < found) found = p;
    }
  }
  if (found != std::string::npos) {
    end = std::max(found, emitted_);
    piece.stopped = true;
  } else if (!last) {
    // Hold back a tail that may still grow into a stop string.
    for (const std::string& s : stops_) {
      if (s.empty()) continue;
      for (size_t k = std::min(s.size() - 1, end - emitted_); k > 0; --k) {
        if (text_.compare(end - k, k, s, 0, k) == 0) {
          end -= k;
          break;
        }
      }
    }
  }
  piece.text = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return piece;
}

}  // namespace kvcast::scheduler
