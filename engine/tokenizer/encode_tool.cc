// encode_tool: tokenizes stdin for comparison against other tokenizers.
//
//   encode_tool <tokenizer.json | tokenizer.model | model_dir>  < input
//
// Each input line is a JSON string literal (when it starts with '"'), a JSON
// array of ids to decode (when it starts with '['), or raw text. For each,
// one JSON line is printed:
//   {"ids": [...], "decoded": "<Decode(ids)>"}
// or {"error": "<status>"}. No BOS is added. Exits 1 when loading fails.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/sentencepiece_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

absl::StatusOr<std::unique_ptr<kvcast::Tokenizer>> Load(const std::string& path) {
  if (absl::EndsWith(path, ".json")) {
    auto t = kvcast::BpeTokenizer::FromFile(path);
    if (!t.ok()) return t.status();
    return std::unique_ptr<kvcast::Tokenizer>(*std::move(t));
  }
  if (absl::EndsWith(path, ".model")) {
    auto t = kvcast::SentencePieceTokenizer::FromFile(path);
    if (!t.ok()) return t.status();
    return std::unique_ptr<kvcast::Tokenizer>(*std::move(t));
  }
  return kvcast::LoadTokenizer(path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: encode_tool <tokenizer.json | tokenizer.model | model_dir>\n";
    return 2;
  }
  auto tokenizer = Load(argv[1]);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().ToString() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string text = line;
    if (!line.empty() && line[0] == '[') {
      const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
      std::vector<int32_t> ids;
      for (const auto& id : parsed.is_array() ? parsed : nlohmann::json::array()) {
        if (id.is_number_integer()) ids.push_back(id.get<int32_t>());
      }
      std::cout << nlohmann::json{{"ids", ids}, {"decoded", (*tokenizer)->Decode(ids)}}.dump(
                       -1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    if (!line.empty() && line[0] == '"') {
      const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_string()) {
        std::cout << nlohmann::json{{"error", "input line is not a JSON string"}}.dump() << "\n";
        continue;
      }
      text = parsed.get<std::string>();
    }
    nlohmann::json out;
    auto ids = (*tokenizer)->Encode(text, /*add_bos=*/false);
    if (ids.ok()) {
      out = {{"ids", *ids}, {"decoded", (*tokenizer)->Decode(*ids)}};
    } else {
      out = {{"error", ids.status().ToString()}};
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
