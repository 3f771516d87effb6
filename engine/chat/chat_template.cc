#include "engine/chat/chat_template.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/gguf.h"

namespace kvcast {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<nlohmann::ordered_json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return j;
}

// A special token of tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> SpecialToken(const nlohmann::ordered_json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// tokenizer_config.json's (or chat_template.json's) "chat_template".
absl::StatusOr<std::string> TemplateFromConfig(const nlohmann::ordered_json& config, const std::string& path) {
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
    return absl::NotFoundError(absl::StrCat(path, ": no chat_template"));
  }
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return absl::NotFoundError(absl::StrCat(path, ": several chat templates and none named \"default\""));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template is neither a string nor a list"));
}

struct Found {
  std::string text;
  std::optional<std::string> bos, eos;
};

absl::StatusOr<Found> FromGguf(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    if (file.status().code() == absl::StatusCode::kNotFound) return file.status();
    return absl::InvalidArgumentError(file.status().message());
  }
  const GgufValue* t = (*file)->Find("tokenizer.chat_template");
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": the model has no chat template (no metadata tokenizer.chat_template)"));
  }
  if (t->type != GgufType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer.chat_template is not a string"));
  }
  Found found;
  found.text = t->s;
  auto tokens = (*file)->GetArray("tokenizer.ggml.tokens", GgufType::kString);
  for (auto [key, out] : {std::make_pair("tokenizer.ggml.bos_token_id", &found.bos),
                          std::make_pair("tokenizer.ggml.eos_token_id", &found.eos)}) {
    auto id = (*file)->GetUint(key);
    if (!id.ok() || !tokens.ok()) continue;
    if (*id >= (*tokens)->elements.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " ", *id, " is not a token id"));
    }
    *out = (*tokens)->elements[*id].s;
  }
  return found;
}

absl::StatusOr<Found> FromHfDirectory(const std::string& dir) {
  Found found;
  nlohmann::ordered_json config;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (IsFile(config_path)) {
    ASSIGN_OR_RETURN(config, ReadJson(config_path));
    found.bos = SpecialToken(config, "bos_token");
    found.eos = SpecialToken(config, "eos_token");
  }
  if (IsFile(dir + "/chat_template.jinja")) {
    ASSIGN_OR_RETURN(found.text, ReadFile(dir + "/chat_template.jinja"));
    return found;
  }
  if (IsFile(dir + "/chat_template.json")) {
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, ReadJson(dir + "/chat_template.json"));
    auto t = TemplateFromConfig(j, dir + "/chat_template.json");
    if (t.ok()) {
      found.text = *t;
      return found;
    }
  }
  auto t = TemplateFromConfig(config, config_path);
  if (!t.ok()) {
    if (t.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(
          dir, ": the model has no chat template (no chat_template.jinja, and ", t.status().message(), ")"));
    }
    return t.status();
  }
  found.text = *t;
  return found;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::string& model_path,
                                                                  const JinjaOptions& options) {
  Found found;
  if (IsDirectory(model_path)) {
    ASSIGN_OR_RETURN(found, FromHfDirectory(model_path));
  } else if (absl::EndsWith(model_path, ".gguf") || IsFile(model_path)) {
    ASSIGN_OR_RETURN(found, FromGguf(model_path));
  } else {
    return absl::NotFoundError(absl::StrCat(model_path, ": no such model file or directory"));
  }
  auto t = FromText(found.text, found.bos, found.eos, options);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(model_path, ": chat template: ", t.status().message()));
  return t;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromText(const std::string& text,
                                                                     std::optional<std::string> bos_token,
                                                                     std::optional<std::string> eos_token,
                                                                     const JinjaOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<JinjaTemplate> parsed, JinjaTemplate::Parse(text, options));
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->source_ = text;
  t->bos_token_ = std::move(bos_token);
  t->eos_token_ = std::move(eos_token);
  t->template_ = std::move(parsed);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                 const nlohmann::ordered_json& extra) const {
  if (!extra.is_object() && !extra.is_null()) return absl::InvalidArgumentError("extra must be a JSON object");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["bos_token"] = bos_token_ ? nlohmann::ordered_json(*bos_token_) : nlohmann::ordered_json();
  context["eos_token"] = eos_token_ ? nlohmann::ordered_json(*eos_token_) : nlohmann::ordered_json();
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  }
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  return template_->Render(context);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages, bool add_generation_prompt,
                                                 const nlohmann::json& extra) const {
  // Through text: nlohmann converts between its two object kinds only so.
  auto convert = [](const nlohmann::json& j) {
    return nlohmann::ordered_json::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), nullptr,
                                         /*allow_exceptions=*/false);
  };
  return Render(convert(messages), add_generation_prompt, convert(extra));
}

}  // namespace kvcast
