// TextStream: a request's generated token ids -> the text to stream, one
// token at a time, with stop strings, at a cost per token that does not
// grow with the output (the ids are detokenized incrementally from the last
// stable point: engine/tokenizer StreamingDecoder).
//
//   TextStream ts(tokenizer, {"\n\n"});
//   for each token: TextStream::Piece p = ts.Push(token, may_stop, last);
//     send p.text; if (p.stopped) the request ends (finish reason STOP)
//
// Text is held back while it may still change: an incomplete UTF-8
// character, or a tail that could grow into a stop string. A stop string
// ends the text before it (it is never sent). The concatenation of every
// Piece's text is the full decode of the ids up to the stop (or, with
// `last`, of all of them), as Tokenizer::Decode(ids, skip_special=true)
// gives it. Not thread-safe; the tokenizer is borrowed.
#ifndef KVCAST_SERVICES_SCHEDULER_TEXT_STREAM_H_
#define KVCAST_SERVICES_SCHEDULER_TEXT_STREAM_H_

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace kvcast::scheduler {

class TextStream {
 public:
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops);

  struct Piece {
    std::string text;      // newly final text (possibly empty)
    bool stopped = false;  // a stop string was found: the stream ends here
  };
  // `may_stop`: stop strings count (false before min_tokens). `last`: the
  // request ends with this token (EOS, a stop id or a length limit):
  // everything held back is released.
  Piece Push(int32_t token, bool may_stop, bool last);

 private:
  StreamingDecoder decoder_;
  const std::vector<std::string> stops_;
  std::string text_;   // decoded so far (final characters only)
  size_t emitted_ = 0;  // text_[0, emitted_) was returned
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_TEXT_STREAM_H_
