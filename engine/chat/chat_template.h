// ChatTemplate: a model's chat template, ready to turn OpenAI-style message
// lists into prompt text exactly as Hugging Face's
// tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does.
//
// Load(model_path) finds the template of
//   - a GGUF file (a path ending in ".gguf"): metadata
//     tokenizer.chat_template, with bos_token / eos_token the text of
//     tokenizer.ggml.tokens[tokenizer.ggml.bos_token_id / eos_token_id]
//     (absent ids leave the token None);
//   - a Hugging Face directory: chat_template.jinja, else
//     chat_template.json {"chat_template": ...}, else tokenizer_config.json
//     "chat_template" (a string, or a list of {"name", "template"} of which
//     "default" is taken); bos_token / eos_token from tokenizer_config.json
//     as strings or {"content": ...} objects.
// Errors: NotFound naming the path when the model has no chat template (or
// no "default" among several) or the path does not exist; InvalidArgument
// for an unreadable GGUF or JSON file, or a template that does not parse
// (jinja.h: "line N: ...").
//
// Render(messages, add_generation_prompt, extra) renders with the variables
// HF passes: messages (passed through as given: content may be a string or
// a list of {"type": "text", "text": ...} parts, which the template
// handles or rejects), add_generation_prompt, tools and documents (None
// unless `extra` sets them), bos_token, eos_token, and every member of
// `extra` (a JSON object, e.g. {"tools": [...], "date_string": "..."}),
// which overrides the others except messages and add_generation_prompt.
// strftime_now is the local time. Errors are JinjaTemplate::Render's:
// InvalidArgument with raise_exception's message as is (e.g. Mistral's
// "conversation roles must alternate ..."), or "line N: ..." for type
// errors; ResourceExhausted past the render limits (JinjaOptions).
// Parse requests with nlohmann::ordered_json so that tojson keeps the
// client's key order; an nlohmann::json argument arrives key-sorted.
//
// Thread safety: immutable after Load; Render may be called concurrently.
#ifndef KVCAST_ENGINE_CHAT_CHAT_TEMPLATE_H_
#define KVCAST_ENGINE_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/chat/jinja.h"
#include "nlohmann/json.hpp"

namespace kvcast {

class ChatTemplate {
 public:
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::string& model_path,
                                                            const JinjaOptions& options = {});
  // A template given as text, with its special tokens (nullopt renders as
  // None, as HF passes a missing token).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromText(const std::string& text,
                                                                std::optional<std::string> bos_token,
                                                                std::optional<std::string> eos_token,
                                                                const JinjaOptions& options = {});

  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& messages, bool add_generation_prompt,
                                     const nlohmann::json& extra = nlohmann::json::object()) const;

  const std::string& source() const { return source_; }
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  ChatTemplate() = default;

  std::string source_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  std::unique_ptr<JinjaTemplate> template_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_CHAT_TEMPLATE_H_
