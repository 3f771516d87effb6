#include "services/openai/openai_protocol.h"

#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvcast::openai {
namespace {

ApiError Bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

constexpr int kMaxTopLogprobs = 20;  // the OpenAI API's limit, and the engine's

// Field readers: absent or null leaves `out` alone; a wrong type is an error.
std::optional<ApiError> ReadBool(const Json& body, const char* name, bool* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return Bad(name, absl::StrCat("'", name, "' must be a boolean, not ", TypeName(*it)));
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadNumber(const Json& body, const char* name, double lo, double hi,
                                   double* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return Bad(name, absl::StrCat("'", name, "' must be a number, not ", TypeName(*it)));
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Bad(name, absl::StrCat("'", name, "' must be in [", lo, ", ", hi, "], got ", v));
  }
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const Json& body, const char* name, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>())) {
    return Bad(name, absl::StrCat("'", name, "' must be an integer, not ", TypeName(*it)));
  }
  const double d = it->get<double>();
  if (!(d >= double(lo) && d <= double(hi))) {
    return Bad(name, absl::StrCat("'", name, "' must be in [", lo, ", ", hi, "], got ", it->dump()));
  }
  *out = it->is_number_unsigned() ? int64_t(it->get<uint64_t>()) : it->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> ReadTokenIds(const Json& v, const std::string& param,
                                     std::vector<int32_t>* out) {
  for (const Json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Bad(param, absl::StrCat("'", param, "' token ids must be non-negative integers, got ",
                                     t.dump()));
    }
    out->push_back(int32_t(t.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompts(const Json& body, std::vector<Prompt>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Bad("prompt", "'prompt' is required");
  const Json& p = *it;
  if (p.is_string()) {
    out->push_back({p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    Prompt one;
    if (auto e = ReadTokenIds(p, "prompt", &one.ids)) return e;
    out->push_back(std::move(one));
  } else if (p.is_array() && !p.empty()) {
    for (const Json& item : p) {
      if (item.is_string()) {
        out->push_back({item.get<std::string>(), {}});
      } else if (item.is_array()) {
        Prompt one;
        if (auto e = ReadTokenIds(item, "prompt", &one.ids)) return e;
        out->push_back(std::move(one));
      } else {
        return Bad("prompt", "'prompt' must be a string, a list of strings, a list of token ids "
                             "or a list of lists of token ids");
      }
    }
  } else {
    return Bad("prompt", p.is_array() ? "'prompt' must not be empty"
                                      : absl::StrCat("'prompt' must be a string or a list, not ",
                                                     TypeName(p)));
  }
  for (const Prompt& one : *out) {
    if (one.text ? one.text->empty() : one.ids.empty()) return Bad("prompt", "empty prompt");
  }
  if (out->size() > 64) return Bad("prompt", "at most 64 prompts per request");
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const Json& body, Json* out) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return Bad("messages", "'messages' must be a non-empty list of messages");
  }
  *out = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(where, absl::StrCat("'", where, "' must be an object"));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Bad(where + ".role", absl::StrCat("'", where, ".role' must be a string"));
    }
    Json msg = m;
    std::string content;
    auto c = m.find("content");
    if (c != m.end()) {
      if (auto e = FlattenContent(*c, &content)) {
        e->param = where + ".content";
        return e;
      }
      msg["content"] = content;
    } else {
      msg["content"] = "";
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> Refuse(const Json& body, const char* name, bool (*ok)(const Json&),
                               const char* why) {
  auto it = body.find(name);
  if (it != body.end() && !it->is_null() && !ok(*it)) {
    return Bad(name, absl::StrCat("'", name, "' ", why));
  }
  return std::nullopt;
}

}  // namespace

std::string RandomHexId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", (unsigned long long)rng(),
                (unsigned long long)rng());
  return buf;
}

std::string ApiError::Body() const {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Dump(Json{{"error", e}});
}

std::optional<ApiError> FlattenContent(const Json& content, std::string* out) {
  out->clear();
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return Bad("content", absl::StrCat("content must be a string or a list of parts, not ",
                                       TypeName(content)));
  }
  bool first = true;
  for (const Json& part : content) {
    auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || !type->is_string()) {
      return Bad("content", "each content part must be an object with a 'type'");
    }
    if (*type != "text") {
      return Bad("content", absl::StrCat("content parts of type '", type->get<std::string>(),
                                         "' are not supported (text only)"));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return Bad("content", "a text part needs a string 'text'");
    }
    if (!first) out->push_back('\n');
    out->append(text->get<std::string>());
    first = false;
  }
  return std::nullopt;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function",
// "function": {"name"}}, against the request's tools.
std::optional<ApiError> ParseToolChoice(const Json& j, CompletionRequest* r) {
  using ToolChoice = CompletionRequest::ToolChoice;
  const bool have_tools = r->tools.is_array() && !r->tools.empty();
  r->tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  for (const Json& t : have_tools ? r->tools : Json::array()) {
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string()) {
      return Bad("tools", "each of 'tools' must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
    }
  }
  auto it = j.find("tool_choice");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c == "none") {
      r->tool_choice = ToolChoice::kNone;
    } else if (c == "auto") {
      if (!have_tools) return Bad("tool_choice", "'tool_choice' \"auto\" needs 'tools'");
    } else if (c == "required") {
      if (!have_tools) return Bad("tool_choice", "'tool_choice' \"required\" needs 'tools'");
      r->tool_choice = ToolChoice::kRequired;
    } else {
      return Bad("tool_choice", absl::StrCat("'tool_choice' ", Json(c).dump(),
                                             " is not one of none, auto, required"));
    }
    return std::nullopt;
  }
  if (!it->is_object() || it->value("type", "") != "function" || !it->contains("function") ||
      !(*it)["function"].is_object() || !(*it)["function"].contains("name") ||
      !(*it)["function"]["name"].is_string()) {
    return Bad("tool_choice", "'tool_choice' must be none, auto, required or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  r->tool_name = (*it)["function"]["name"].get<std::string>();
  bool known = false;
  for (const Json& t : have_tools ? r->tools : Json::array()) known = known || t["function"]["name"] == r->tool_name;
  if (!known) {
    return Bad("tool_choice", absl::StrCat("'tool_choice' names ", Json(r->tool_name).dump(),
                                           ", which is not among 'tools'"));
  }
  r->tool_choice = ToolChoice::kNamed;
  return std::nullopt;
}

// response_format {"type": "text" | "json_object" | "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}, or vLLM's
// structured_outputs {json (a schema, or its JSON text) | regex | choice |
// grammar} (guided_json, guided_regex, guided_choice, guided_grammar before
// vLLM 0.12).
std::optional<ApiError> ParseResponseFormat(const Json& j, CompletionRequest* r) {
  using Format = CompletionRequest::Format;
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
      return Bad("response_format", "'response_format' must be an object with a 'type'");
    }
    const std::string type = (*it)["type"].get<std::string>();
    if (type == "json_object") {
      r->format = Format::kJsonObject;
    } else if (type == "json_schema") {
      auto spec = it->find("json_schema");
      if (spec == it->end() || !spec->is_object()) {
        return Bad("response_format.json_schema",
                   "'response_format.json_schema' must be an object with the 'schema'");
      }
      if (auto strict = spec->find("strict"); strict != spec->end() && !strict->is_null() &&
                                               !strict->is_boolean()) {
        return Bad("response_format.json_schema.strict", "'strict' must be a boolean");
      }
      auto schema = spec->find("schema");
      if (schema == spec->end() || schema->is_null()) {
        r->format = Format::kJsonObject;  // no schema: any JSON object
      } else if (!schema->is_object() && !schema->is_boolean()) {
        return Bad("response_format.json_schema.schema", "'schema' must be a JSON Schema object");
      } else {
        r->format = Format::kJsonSchema;
        r->json_schema = schema->dump();
      }
    } else if (type != "text") {
      return Bad("response_format.type", absl::StrCat("'response_format.type' ", Json(type).dump(),
                                                      " is not one of text, json_object, json_schema"));
    }
  }
  // vLLM's extras, by their names since v0.12 (structured_outputs.json,
  // .regex, .choice, .grammar) and before (guided_json, ...).
  struct Guided {
    const char* kind;
    std::string param;
    const Json* value;
  };
  std::vector<Guided> guided;
  for (const char* kind : {"json", "regex", "choice", "grammar"}) {
    const std::string name = absl::StrCat("guided_", kind);
    if (auto it = j.find(name); it != j.end() && !it->is_null()) guided.push_back({kind, name, &*it});
  }
  if (auto so = j.find("structured_outputs"); so != j.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : so->items()) {
      const std::string param = absl::StrCat("structured_outputs.", key);
      const char* kind = key == "json"     ? "json"
                         : key == "regex"  ? "regex"
                         : key == "choice" ? "choice"
                         : key == "grammar" ? "grammar"
                                            : nullptr;
      if (kind != nullptr) {
        if (!value.is_null()) guided.push_back({kind, param, &value});
      } else if (!value.is_null() && value != false) {
        return Bad(param, absl::StrCat("'", param, "' is not supported (json, regex, choice and grammar are)"));
      }
    }
  }
  for (const Guided& g : guided) {
    const std::string& name = g.param;
    const Json& v = *g.value;
    if (r->format != Format::kText) {
      return Bad(name, absl::StrCat("give one of response_format, structured_outputs' json, regex, choice "
                                    "and grammar (or guided_*), not '", name, "' beside another"));
    }
    const std::string kind = g.kind;
    if (kind == "json") {
      Json schema = v;
      if (v.is_string()) {
        schema = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded()) return Bad(name, absl::StrCat("'", name, "' is not valid JSON"));
      }
      if (!schema.is_object()) return Bad(name, absl::StrCat("'", name, "' must be a JSON Schema object"));
      r->format = Format::kJsonSchema;
      r->json_schema = schema.dump();
    } else if (kind == "regex" || kind == "grammar") {
      if (!v.is_string() || v.get<std::string>().empty()) {
        return Bad(name, absl::StrCat("'", name, "' must be a non-empty string"));
      }
      r->format = kind == "regex" ? Format::kRegex : Format::kGrammar;
      (kind == "regex" ? r->regex : r->grammar) = v.get<std::string>();
    } else {
      if (!v.is_array() || v.empty()) {
        return Bad(name, absl::StrCat("'", name, "' must be a non-empty list of strings"));
      }
      for (const Json& c : v) {
        if (!c.is_string() || c.get<std::string>().empty()) {
          return Bad(name, absl::StrCat("'", name, "' must be a non-empty list of non-empty strings"));
        }
        r->choices.push_back(c.get<std::string>());
      }
      r->format = Format::kChoice;
    }
  }
  return std::nullopt;
}

namespace {

// The fields only one endpoint takes: prompts and echo/suffix/logprobs
// (completions), messages, tools and their template (chat).
std::optional<ApiError> ParseEndpointFields(const Json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  if (r.endpoint == Endpoint::kCompletions) {
    if (auto e = ParsePrompts(j, &r.prompts)) return e;
    if (auto e = ReadBool(j, "echo", &r.echo)) return e;
    if (auto e = Refuse(j, "suffix", [](const Json& v) { return v.is_string() && v.empty(); },
                        "is not supported")) return e;

    if (auto it = j.find("logprobs"); it != j.end() && !it->is_null() && *it != false) {
      std::optional<int64_t> k;
      if (auto e = ReadInt(j, "logprobs", 0, kMaxTopLogprobs, &k)) return e;
      r.logprobs = true;
      r.top_logprobs = int(*k);
    }
  } else {
    if (auto e = ParseMessages(j, &r.messages)) return e;
    if (auto e = Refuse(j, "echo", [](const Json& v) { return v == false; },
                        "is not supported on chat (it is a /v1/completions field)")) return e;
    if (auto it = j.find("tools"); it != j.end() && !it->is_null()) {
      if (!it->is_array()) return Bad("tools", "'tools' must be a list");
      r.tools = *it;
    }
    if (auto e = ParseToolChoice(j, &r)) return e;
    if (auto e = ReadBool(j, "add_generation_prompt", &r.add_generation_prompt)) return e;
    if (auto it = j.find("chat_template_kwargs"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) return Bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.chat_template_kwargs = *it;
    }
    if (auto e = ReadBool(j, "logprobs", &r.logprobs)) return e;
    std::optional<int64_t> k;
    if (auto e = ReadInt(j, "top_logprobs", 0, kMaxTopLogprobs, &k)) return e;
    if (k && *k > 0 && !r.logprobs) {
      return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r.top_logprobs = k ? int(*k) : 0;
  }
  return std::nullopt;
}

// n (with best_of on completions): at most 64 generations over all prompts.
std::optional<ApiError> ParseChoices(const Json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  std::optional<int64_t> n;
  if (auto e = ReadInt(j, "n", 1, 64, &n)) return e;
  if (n) r.n = int(*n);
  const size_t prompts = r.endpoint == Endpoint::kCompletions ? r.prompts.size() : 1;
  if (prompts * size_t(r.n) > 64) {
    return Bad("n", absl::StrCat("'n' x prompts = ", prompts * size_t(r.n), " choices; at most 64"));
  }
  if (r.endpoint != Endpoint::kCompletions) return std::nullopt;
  std::optional<int64_t> best_of;
  if (auto e = ReadInt(j, "best_of", 1, 64, &best_of)) return e;
  if (!best_of) return std::nullopt;
  if (*best_of < r.n) {
    return Bad("best_of", absl::StrCat("'best_of' (", *best_of, ") must be >= n (", r.n, ")"));
  }
  if (prompts * size_t(*best_of) > 64) {
    return Bad("best_of", absl::StrCat("'best_of' x prompts = ", prompts * size_t(*best_of),
                                       " generations; at most 64"));
  }
  r.best_of = int(*best_of);
  return std::nullopt;
}

// OpenAI's logit_bias: {"TOKEN_ID": bias in [-100, 100], ...} (ids as the
// object's keys, so strings of digits).
std::optional<ApiError> ParseLogitBias(const Json& j, CompletionRequest* out) {
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return Bad("logit_bias", absl::StrCat("'logit_bias' must be an object of token ids, not ", TypeName(*it)));
  }
  if (it->size() > 1024) return Bad("logit_bias", "'logit_bias' has more than 1024 tokens");
  for (const auto& [key, value] : it->items()) {
    int32_t id = -1;
    if (!absl::SimpleAtoi(key, &id) || id < 0) {
      return Bad("logit_bias", absl::StrCat("'logit_bias' key '", key, "' is not a token id"));
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      return Bad("logit_bias", absl::StrCat("'logit_bias' of token ", key, " must be a number in [-100, 100]"));
    }
    out->logit_bias.emplace_back(id, value.get<float>());
  }
  return std::nullopt;
}

// Lengths and sampling parameters.
std::optional<ApiError> ParseSampling(const Json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  if (auto e = ReadNumber(j, "frequency_penalty", -2, 2, &r.frequency_penalty)) return e;
  if (auto e = ReadNumber(j, "presence_penalty", -2, 2, &r.presence_penalty)) return e;
  if (auto e = ParseLogitBias(j, out)) return e;

  std::optional<int64_t> v;
  const char* max_name = j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // 0 (the prompt alone) only with echo, as vLLM.
  if (auto e = ReadInt(j, max_name, r.echo ? 0 : 1, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) r.max_tokens = int(*v);
  v.reset();
  if (auto e = ReadInt(j, "min_tokens", 0, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) r.min_tokens = int(*v);
  if (r.max_tokens && r.min_tokens > *r.max_tokens) {
    return Bad("min_tokens", absl::StrCat("'min_tokens' (", r.min_tokens,
                                          ") must not exceed max_tokens (", *r.max_tokens, ")"));
  }
  v.reset();
  if (auto e = ReadInt(j, "top_k", -1, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) r.top_k = *v < 0 ? 0 : int(*v);
  v.reset();
  if (auto e = ReadInt(j, "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max(), &v)) return e;
  if (v) r.seed = uint64_t(*v);
  if (auto e = ReadNumber(j, "temperature", 0, 100, &r.temperature)) return e;
  if (auto e = ReadNumber(j, "top_p", 0, 1, &r.top_p)) return e;
  if (r.top_p == 0) return Bad("top_p", "'top_p' must be in (0, 1]");
  if (auto e = ReadNumber(j, "repetition_penalty", 0, 100, &r.repetition_penalty)) return e;
  if (r.repetition_penalty == 0) return Bad("repetition_penalty", "'repetition_penalty' must be > 0");
  if (auto e = ReadBool(j, "ignore_eos", &r.ignore_eos)) return e;
  if (auto e = ReadBool(j, "stream", &r.stream)) return e;
  return std::nullopt;
}

// stop strings and stop_token_ids.
std::optional<ApiError> ParseStops(const Json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const Json& s : *it) {
        if (!s.is_string()) return Bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return Bad("stop", "'stop' must be a string or a list of strings");
    }
    for (const std::string& s : r.stop) {
      if (s.empty()) return Bad("stop", "'stop' strings must not be empty");
    }
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return Bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    if (auto e = ReadTokenIds(*it, "stop_token_ids", &r.stop_token_ids)) return e;
  }
  return std::nullopt;
}

// stream, stream_options and user.
std::optional<ApiError> ParseStreaming(const Json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  if (auto it = j.find("user"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Bad("user", "'user' must be a string");
    r.user = it->get<std::string>();
  }
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return Bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) return Bad("stream_options", "'stream_options' needs \"stream\": true");
    if (auto e = ReadBool(*it, "include_usage", &r.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
    if (auto e = ReadBool(*it, "continuous_usage_stats", &r.continuous_usage_stats)) {
      e->param = "stream_options.continuous_usage_stats";
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(Endpoint endpoint, const std::string& body,
                                     CompletionRequest* out) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!j.is_object()) return Bad("", "the request body must be a JSON object");
  CompletionRequest& r = *out;
  r = CompletionRequest();
  r.endpoint = endpoint;
  if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Bad("model", "'model' must be a string");
    r.model = it->get<std::string>();
  }
  if (auto e = ParseEndpointFields(j, &r)) return e;
  if (auto e = ParseResponseFormat(j, &r)) return e;
  if (r.format != CompletionRequest::Format::kText &&
      (r.tool_choice == CompletionRequest::ToolChoice::kRequired ||
       r.tool_choice == CompletionRequest::ToolChoice::kNamed)) {
    return Bad("tool_choice", "a forced 'tool_choice' takes no response_format or guided_* beside it");
  }
  if (auto e = ParseChoices(j, &r)) return e;
  if (auto e = ParseSampling(j, &r)) return e;
  if (r.stream && r.best_of > r.n) {
    // As OpenAI: the best are known only once every candidate has ended.
    return Bad("best_of", "'best_of' greater than n cannot be streamed");
  }
  if (auto e = ParseStops(j, &r)) return e;
  return ParseStreaming(j, &r);
}

std::string NewResponseId(Endpoint endpoint) {
  return (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + RandomHexId();
}

Json Usage::ToJson() const {
  return Json{{"prompt_tokens", prompt_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"completion_tokens", completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

Json FinishReason(const std::string& reason) {
  return reason.empty() ? Json(nullptr) : Json(reason);
}

int Utf8Chars(const std::string& s) {
  int n = 0;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool whole = len > 0 && i + len <= s.size();
    for (size_t k = 1; whole && k < len; ++k) whole = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    i += whole ? len : 1;
    ++n;
  }
  return n;
}

Json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobs>& tokens, int text_offset,
                  bool requested) {
  if (tokens.empty() && !requested) return nullptr;
  auto bytes_of = [](const std::string& b) {
    Json a = Json::array();
    for (char c : b) a.push_back(int(static_cast<unsigned char>(c)));
    return a;
  };
  if (endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenLogprobs& t : tokens) {
      Json top = Json::array();
      for (const auto& [b, lp] : t.top) {
        top.push_back({{"token", b}, {"logprob", lp}, {"bytes", bytes_of(b)}});
      }
      content.push_back({{"token", t.bytes},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(t.bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenLogprobs& t : tokens) {
    toks.push_back(t.bytes);
    offsets.push_back(text_offset);
    text_offset += Utf8Chars(t.bytes);
    if (t.none) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const auto& [b, lp] : t.top) {
      if (!top.contains(b)) top[b] = lp;
    }
    tops.push_back(std::move(top));
  }
  return Json{{"tokens", std::move(toks)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

Json StreamChunk(Endpoint endpoint, const std::string& id, int64_t created,
                 const std::string& model, int index, const std::string& text,
                 const std::string& finish_reason, bool role_chunk, Json logprobs) {
  Json choice = {{"index", index}};
  if (endpoint == Endpoint::kChat) {
    if (role_chunk) {
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    } else if (text.empty() && !finish_reason.empty()) {
      choice["delta"] = Json::object();
    } else {
      choice["delta"] = {{"content", text}};
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = FinishReason(finish_reason);
  if (!finish_reason.empty()) choice["stop_reason"] = nullptr;
  return Json{{"id", id},
              {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({choice})}};
}

Json ToolCallJson(const std::string& id, const std::string& name, const std::string& arguments,
                  std::optional<int> index) {
  Json call = Json::object();
  if (index) call["index"] = *index;
  call["id"] = id;
  call["type"] = "function";
  call["function"] = {{"name", name}, {"arguments", arguments}};
  return call;
}

Json ToolCallsChunk(const std::string& id, int64_t created, const std::string& model, int index,
                    Json tool_calls) {
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({{{"index", index},
                                        {"delta", {{"tool_calls", std::move(tool_calls)}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}})}};
}

Json UsageChunk(Endpoint endpoint, const std::string& id, int64_t created,
                const std::string& model, const Usage& usage) {
  return Json{{"id", id},
              {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array()},
              {"usage", usage.ToJson()}};
}

Json FullResponse(Endpoint endpoint, const std::string& id, int64_t created,
                  const std::string& model, const std::vector<Choice>& choices,
                  const Usage& usage) {
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c = {{"index", int(i)}};
    if (endpoint == Endpoint::kChat) {
      const bool only_calls = choices[i].text.empty() && !choices[i].tool_calls.empty();
      c["message"] = {{"role", "assistant"},
                      {"content", only_calls ? Json(nullptr) : Json(choices[i].text)},
                      {"tool_calls", choices[i].tool_calls}};
    } else {
      c["text"] = choices[i].text;
    }
    c["logprobs"] = choices[i].logprobs;
    c["finish_reason"] = FinishReason(choices[i].finish_reason);
    c["stop_reason"] = nullptr;
    list.push_back(std::move(c));
  }
  return Json{{"id", id},
              {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(list)},
              {"usage", usage.ToJson()}};
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SseEvent(const Json& json) { return absl::StrCat("data: ", Dump(json), "\n\n"); }

}  // namespace kvcast::openai
