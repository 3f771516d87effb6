// Splits text around added/special token strings, as HF tokenizers does
// before pre-tokenization: leftmost match wins, the longest at a position.
// Immutable after construction; Split() is const and thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_ADDED_TOKENS_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvcast {
namespace tokenizer_internal {

class AddedTokenMatcher {
 public:
  struct Segment {
    std::string_view text;  // A view into the text given to Split().
    int32_t id;             // The added token's id, or -1 for plain text.
  };

  // `tokens` holds (content, id); empty contents are ignored.
  explicit AddedTokenMatcher(const std::vector<std::pair<std::string, int32_t>>& tokens);

  std::vector<Segment> Split(std::string_view text) const;

 private:
  // Per first byte: candidate tokens, longest first.
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_byte_;
};

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_ADDED_TOKENS_H_
