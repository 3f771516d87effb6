#include "services/openai/tool_calls.h"

#include <random>

#include "nlohmann/json.hpp"
#include "services/openai/openai_protocol.h"

namespace kvcast::openai {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";

// (std::string_view helpers: Debian's Abseil has its own string_view.)
std::string_view Strip(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}
bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string RandomId(ToolCallFormat format) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  if (format == ToolCallFormat::kMistral) {
    static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id(9, 'a');
    for (char& c : id) c = kAlnum[rng() % (sizeof(kAlnum) - 1)];
    return id;
  }
  return "chatcmpl-tool-" + RandomHexId();
}

// {"name": N, "arguments" (or `args_key`): {...} or its JSON text}.
std::optional<ToolCall> CallOf(const Json& j, ToolCallFormat format) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    return std::nullopt;
  }
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  Json args = j.value(key, Json::object());
  if (args.is_string()) args = Json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return std::nullopt;
  return ToolCall{RandomId(format), j["name"].get<std::string>(), args.dump()};
}

std::optional<std::string> Content(std::string_view text) {
  std::string_view t = Strip(text);
  if (t.empty()) return std::nullopt;
  return std::string(t);
}

ParsedToolCalls ParseHermes(std::string_view text) {
  ParsedToolCalls out;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    size_t close = text.find(kHermesClose, open);
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    const std::string_view body = text.substr(open + kHermesOpen.size(), body_end - open - kHermesOpen.size());
    std::optional<ToolCall> call =
        CallOf(Json::parse(body, nullptr, /*allow_exceptions=*/false), ToolCallFormat::kHermes);
    const size_t next = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    content.append(text.substr(at, open - at));
    if (call) {
      out.calls.push_back(*std::move(call));
    } else {
      content.append(text.substr(open, next - open));  // not a call: it stays text
    }
    at = next;
  }
  content.append(text.substr(std::min(at, text.size())));
  out.content = Content(content);
  return out;
}

// The answer is one JSON value (or, for Llama, several joined by ';').
ParsedToolCalls ParseWhole(ToolCallFormat format, std::string_view text) {
  std::string_view t = Strip(text);
  const std::string_view tag = format == ToolCallFormat::kMistral ? kMistralTag : kPythonTag;
  if (StartsWith(t, tag)) t = Strip(t.substr(tag.size()));
  ParsedToolCalls out;
  std::vector<Json> values;
  if (format == ToolCallFormat::kMistral) {
    Json j = Json::parse(t, nullptr, /*allow_exceptions=*/false);
    if (j.is_array()) values.assign(j.begin(), j.end());
    if (j.is_object()) values.push_back(j);
  } else {
    for (size_t at = 0; at <= t.size();) {
      size_t semi = t.find(';', at);
      if (semi == std::string_view::npos) semi = t.size();
      Json j = Json::parse(t.substr(at, semi - at), nullptr, /*allow_exceptions=*/false);
      at = semi + 1;
      if (!j.is_object()) {
        values.clear();
        break;
      }
      values.push_back(std::move(j));
    }
  }
  for (const Json& v : values) {
    std::optional<ToolCall> call = CallOf(v, format);
    if (!call) {
      out.calls.clear();
      break;
    }
    out.calls.push_back(*std::move(call));
  }
  if (out.calls.empty()) out.content = Content(text);
  return out;
}

}  // namespace

ToolCallFormat ToolCallFormatOf(std::string_view chat_template) {
  if (Contains(chat_template, kMistralTag)) return ToolCallFormat::kMistral;
  if (Contains(chat_template, kPythonTag) ||
      Contains(chat_template, "\"parameters\": ")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text) {
  if (format == ToolCallFormat::kHermes) return ParseHermes(text);
  return ParseWhole(format, text);
}

ForcedToolCall ForcedToolCallOf(ToolCallFormat format, const Json& tools, const std::string& name) {
  const char* args = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  Json calls = Json::array();
  for (const Json& t : tools) {
    const Json& f = t["function"];
    if (!name.empty() && f["name"] != name) continue;
    Json params = f.contains("parameters") && f["parameters"].is_object() && !f["parameters"].empty()
                      ? f["parameters"]
                      : Json{{"type", "object"}};
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", f["name"]}}}, {args, params}}},
                     {"required", {"name", args}},
                     {"additionalProperties", false}});
  }
  ForcedToolCall out;
  out.schema = (calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}}).dump();
  switch (format) {
    case ToolCallFormat::kHermes:
      out.prefix = "<tool_call>\n";
      out.suffix = "\n</tool_call>";
      break;
    case ToolCallFormat::kMistral:  // as its template writes a call: "[TOOL_CALLS] [" ... "]"
      out.prefix_token = "[TOOL_CALLS]";
      out.prefix = " [";
      out.suffix = "]";
      break;
    case ToolCallFormat::kLlama3Json:
      break;
  }
  return out;
}

size_t ToolCallStart(ToolCallFormat format, std::string_view text) {
  if (format == ToolCallFormat::kHermes) {
    if (size_t open = text.find(kHermesOpen); open != std::string_view::npos) return open;
    // A tail that may grow into the tag.
    for (size_t n = std::min(text.size(), kHermesOpen.size() - 1); n > 0; --n) {
      if (kHermesOpen.substr(0, n) == text.substr(text.size() - n)) return text.size() - n;
    }
    return text.size();
  }
  // A call is the whole answer: hold it from its first character while it
  // may still be one.
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return 0;  // only blanks so far
  const std::string_view t = text.substr(first);
  const std::string_view tag = format == ToolCallFormat::kMistral ? kMistralTag : kPythonTag;
  const char opener = format == ToolCallFormat::kMistral ? '[' : '{';
  if (t[0] == opener || StartsWith(t, tag) ||
      StartsWith(tag, t.substr(0, std::min(t.size(), tag.size())))) {
    return 0;
  }
  return text.size();
}

}  // namespace kvcast::openai
