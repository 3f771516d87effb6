#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

SentencePieceLoader g_sentencepiece_loader = nullptr;

// Reads "bos_token"/"eos_token" from tokenizer_config.json; each is a
// string, an {"content": string} object, or null/absent.
absl::StatusOr<SpecialTokenNames> ReadSpecialTokenNames(const std::string& path) {
  SpecialTokenNames names;
  std::ifstream in(path, std::ios::binary);
  if (!in) return names;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const nlohmann::json root = nlohmann::json::parse(buffer.str(), nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  for (auto [key, out] : {std::make_pair("bos_token", &names.bos_token),
                          std::make_pair("eos_token", &names.eos_token)}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    const nlohmann::json* value = &*it;
    if (value->is_object()) {
      auto content = value->find("content");
      value = content == value->end() ? nullptr : &*content;
    }
    if (value == nullptr || !value->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", key, " is neither a string nor an object with string \"content\""));
    }
    *out = value->get<std::string>();
  }
  return names;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  struct stat st;
  if (::stat(model_dir.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(model_dir));
    return LoadGgufTokenizer(*gguf);
  }
  const std::string dir =
      absl::EndsWith(model_dir, "/") || model_dir.empty() ? model_dir : model_dir + "/";
  ASSIGN_OR_RETURN(SpecialTokenNames names,
                   ReadSpecialTokenNames(dir + "tokenizer_config.json"));
  if (FileExists(dir + "tokenizer.json")) {
    ASSIGN_OR_RETURN(auto t, BpeTokenizer::FromFile(dir + "tokenizer.json", names));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (FileExists(dir + "tokenizer.model")) {
    if (g_sentencepiece_loader == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          model_dir, " has only a SentencePiece tokenizer.model, which this binary cannot "
          "load (it links gRPC); add a tokenizer.json (HF `tokenizers` converts it)"));
    }
    return g_sentencepiece_loader(dir + "tokenizer.model", names);
  }
  return absl::NotFoundError(
      absl::StrCat("no tokenizer.json or tokenizer.model in ", model_dir));
}

void SetSentencePieceLoader(SentencePieceLoader loader) { g_sentencepiece_loader = loader; }

std::string StreamingDecoder::Push(int32_t id) {
  ids_.push_back(id);
  const absl::Span<const int32_t> all(ids_);
  const std::string printed = tokenizer_->Decode(all.subspan(0, read_), skip_special_);
  const std::string text = tokenizer_->Decode(all, skip_special_);
  // A trailing U+FFFD may be a character whose remaining bytes are still to
  // come; hold everything back until it resolves.
  if (text.size() <= printed.size() || absl::EndsWith(text, "\xEF\xBF\xBD")) return "";
  std::string fresh = text.substr(printed.size());
  // Keep the last printed chunk as context for the next decode.
  ids_.erase(ids_.begin(), ids_.begin() + read_);
  read_ = ids_.size();
  return fresh;
}

std::string StreamingDecoder::Flush() {
  const absl::Span<const int32_t> all(ids_);
  const std::string printed = tokenizer_->Decode(all.subspan(0, read_), skip_special_);
  const std::string text = tokenizer_->Decode(all, skip_special_);
  ids_.clear();
  read_ = 0;
  return text.size() > printed.size() ? text.substr(printed.size()) : "";
}

}  // namespace kvcast
