#include "engine/tokenizer/internal/added_tokens.h"

#include <algorithm>

namespace kvcast {
namespace tokenizer_internal {

AddedTokenMatcher::AddedTokenMatcher(
    const std::vector<std::pair<std::string, int32_t>>& tokens) {
  for (const auto& t : tokens) {
    if (!t.first.empty()) by_first_byte_[static_cast<uint8_t>(t.first[0])].push_back(t);
  }
  for (auto& v : by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return a.first.size() > b.first.size();
    });
  }
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& c : candidates) {
      if (text.compare(pos, c.first.size(), c.first) == 0) {
        hit = &c;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain_start) out.push_back({text.substr(plain_start, pos - plain_start), -1});
    out.push_back({text.substr(pos, hit->first.size()), hit->second});
    pos += hit->first.size();
    plain_start = pos;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
  return out;
}

}  // namespace tokenizer_internal
}  // namespace kvcast
