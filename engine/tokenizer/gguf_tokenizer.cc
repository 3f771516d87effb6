#include "engine/tokenizer/gguf_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/spm_gguf_tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using nlohmann::json;

constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json Split(const char* pattern) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", pattern}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

json ByteLevel(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}

// The tokenizer.json pre_tokenizer and normalizer HF uses for the model
// family llama.cpp calls `pre`.
absl::Status PreTokenizer(const GgufFile& file, const std::string& pre, json* root) {
  if (pre == "gpt2") {
    (*root)["pre_tokenizer"] = ByteLevel(true);
  } else if (pre == "smollm") {
    (*root)["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers", {Split(R"(\p{N})"), ByteLevel(true)}}};
  } else if (pre == "llama-bpe") {
    (*root)["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers", {Split(kLlama3Pattern), ByteLevel(false)}}};
  } else if (pre == "qwen2") {
    (*root)["normalizer"] = {{"type", "NFC"}};
    (*root)["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers", {Split(kQwen2Pattern), ByteLevel(false)}}};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tokenizer.ggml.pre '", pre,
        "' is not supported (supported: gpt2, smollm, llama-bpe, qwen2)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TokenName(const GgufFile& file, const std::string& key,
                                      const std::vector<std::string>& tokens) {
  ASSIGN_OR_RETURN(uint64_t id, file.GetUint(key));
  if (id >= tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata '", key, "' is ", id,
                                                   ", past the ", tokens.size(), " tokens"));
  }
  return tokens[id];
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string model, file.GetString("tokenizer.ggml.model"));
  if (model == "llama") return LoadSpmGgufTokenizer(file);
  if (model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tokenizer.ggml.model '", model,
                                                   "' is not supported (supported: gpt2, llama)"));
  }
  ASSIGN_OR_RETURN(const GgufValue* tokens_value,
                   file.GetArray("tokenizer.ggml.tokens", GgufType::kString));
  ASSIGN_OR_RETURN(const GgufValue* merges_value,
                   file.GetArray("tokenizer.ggml.merges", GgufType::kString));
  std::vector<std::string> tokens;
  tokens.reserve(tokens_value->elements.size());
  for (const GgufValue& t : tokens_value->elements) tokens.push_back(t.s);
  std::vector<int64_t> types(tokens.size(), 1);
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(const GgufValue* types_value,
                     file.GetArray("tokenizer.ggml.token_type", GgufType::kI32));
    if (types_value->elements.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tokenizer.ggml.token_type has ", types_value->elements.size(),
          " entries for ", tokens.size(), " tokens"));
    }
    for (size_t i = 0; i < types.size(); ++i) types[i] = types_value->elements[i].i;
  }

  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    if (types[i] == 3 || types[i] == 4) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"special", types[i] == 3}});
    }
  }
  json merges = json::array();
  for (const GgufValue& m : merges_value->elements) merges.push_back(m.s);
  json root = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)},
                          {"merges", std::move(merges)}}},
               {"added_tokens", std::move(added)},
               {"decoder", {{"type", "ByteLevel"}}}};
  std::string pre = "gpt2";
  if (file.Find("tokenizer.ggml.pre") != nullptr) {
    ASSIGN_OR_RETURN(pre, file.GetString("tokenizer.ggml.pre"));
  }
  RETURN_IF_ERROR(PreTokenizer(file, pre, &root));

  SpecialTokenNames names;
  bool add_bos = false;
  if (file.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    ASSIGN_OR_RETURN(add_bos, file.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (add_bos && file.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    ASSIGN_OR_RETURN(names.bos_token, TokenName(file, "tokenizer.ggml.bos_token_id", tokens));
  }
  if (file.Find("tokenizer.ggml.eos_token_id") != nullptr) {
    ASSIGN_OR_RETURN(names.eos_token, TokenName(file, "tokenizer.ggml.eos_token_id", tokens));
  }
  auto tokenizer = BpeTokenizer::FromJsonValue(root, names);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), absl::StrCat(file.path(), " (GGUF tokenizer): ",
                                                                tokenizer.status().message()));
  }
  return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
}

}  // namespace kvcast
