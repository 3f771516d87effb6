// The OpenAI-compatible request and response bodies, as vLLM serves them
// (docs/openai-api.md): parsing and validation of /v1/completions and
// /v1/chat/completions bodies, and the JSON of responses, stream chunks and
// errors. No I/O: openai_frontend.h does that.
//
// Thread safety: pure functions.
#ifndef KVCAST_SERVICES_OPENAI_OPENAI_PROTOCOL_H_
#define KVCAST_SERVICES_OPENAI_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvcast::openai {

using Json = nlohmann::ordered_json;

// An error answered as HTTP `status` with
// {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; "" = null
  std::string code;   // "" = null
  std::string retry_after;  // seconds, for 429 and 503 (Retry-After); "" = 1
  std::string Body() const;
};

enum class Endpoint { kCompletions, kChat };

struct Prompt {
  std::optional<std::string> text;  // else `ids`
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // "" = the served model
  // Completions: one choice per prompt. Chat: empty (see `messages`).
  std::vector<Prompt> prompts;
  // Chat: the messages, each {"role", "content" (a string: text parts are
  // joined with "\n"), and any other fields as given (e.g. tool_calls)}.
  Json messages;
  Json tools;                      // chat: passed to the template; null if absent
  // Chat: `tool_choice` (default auto with tools, none without): none
  // leaves tool calls in the text; auto parses them out of the answer;
  // required / a named function force one by constrained decoding.
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;           // kNamed
  bool add_generation_prompt = true;
  Json chat_template_kwargs;       // chat: extra template variables (object or null)

  std::optional<int> max_tokens;   // unset: completions 16, chat the context's rest
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;                   // 0 = off (vLLM's -1 is accepted as off)
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;  // OpenAI's, over the generated tokens, [-2, 2]
  double presence_penalty = 0.0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  std::optional<uint64_t> seed;    // unset: a random seed per choice
  // Choices per prompt (choice p * n + i is prompt p's i-th), each with its
  // own seed stream (seed + i); the prompt counts once in the usage.
  int n = 1;
  // Completions: candidates generated per prompt (>= n; 0: n), of which the
  // n with the highest cumulative log-probability are returned (not with
  // stream); usage counts every candidate's tokens.
  int best_of = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int min_tokens = 0;
  std::string user;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  // Chat `logprobs` + `top_logprobs` (0-20); completions `logprobs` (an int,
  // 0-20: the top count).
  bool logprobs = false;
  int top_logprobs = 0;
  // Completions: each choice's text starts with its prompt's, and with
  // logprobs its logprobs with the prompt's tokens' (the first token's
  // null); max_tokens may then be 0 (the prompt alone, nothing generated).
  bool echo = false;
  // response_format (or vLLM's structured_outputs.json / guided_json): the
  // format the output must have, enforced by constrained decoding. The
  // schema or grammar is checked by the scheduler (a 400 naming an
  // unsupported keyword or the grammar's fault).
  // kRegex, kChoice, kGrammar: vLLM's regex, choice, grammar.
  enum class Format { kText, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Format format = Format::kText;
  std::string json_schema;  // kJsonSchema: the schema's JSON text, key order kept
  std::string grammar;               // kGrammar: GBNF / EBNF text (engine/grammar/ebnf.h)
  std::string regex;                 // kRegex
  std::vector<std::string> choices;  // kChoice
};

// Parses and validates a request body. Unknown fields are ignored (as vLLM
// does); fields kvcast cannot honour (suffix, images, chat's echo, vLLM's
// structured_outputs other than json/regex/choice/grammar) are refused
// naming the field, never silently dropped.
std::optional<ApiError> ParseRequest(Endpoint endpoint, const std::string& body,
                                     CompletionRequest* out);

// Flattens a chat message's content (string, null, or a list of
// {"type":"text","text"} parts) into a string; other part types are an error.
std::optional<ApiError> FlattenContent(const Json& content, std::string* out);

// 32 random hex digits.
std::string RandomHexId();
// A response/chunk identifier: "cmpl-" or "chatcmpl-" and RandomHexId().
std::string NewResponseId(Endpoint endpoint);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  Json ToJson() const;  // with prompt_tokens_details.cached_tokens
};

// The finish reason's JSON: "stop", "length", or null for "".
Json FinishReason(const std::string& reason);

// One generated token's log-probabilities, with the tokens as text: `bytes`
// the token's own bytes (a piece of a UTF-8 character for some byte-level
// BPE tokens), or "token_id:N" where no tokenizer is at hand.
struct TokenLogprobs {
  std::string bytes;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
  bool none = false;  // an echoed prompt's first token: no log-probabilities (null)
};
// The choice's "logprobs" for these tokens: chat {"content": [{"token",
// "logprob", "bytes", "top_logprobs": [...]}], "refusal": null};
// completions {"tokens", "token_logprobs", "top_logprobs": [{token:
// logprob}], "text_offset"}, offsets counted in characters from
// `text_offset` (the choice's text before these tokens). Null when
// `tokens` is empty and `requested` is false.
Json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobs>& tokens, int text_offset,
                  bool requested);
// Characters of UTF-8 `s` (invalid bytes count one each, as U+FFFD).
int Utf8Chars(const std::string& s);

// The JSON of a stream chunk for one choice. `finish_reason` "" = null.
// Chat: `role_chunk` gives the first chunk's delta {"role":"assistant","content":""};
// otherwise the delta is {"content": text}, or {} with a finish reason and no text.
// `logprobs`: the choice's "logprobs" (null unless asked for).
Json StreamChunk(Endpoint endpoint, const std::string& id, int64_t created,
                 const std::string& model, int index, const std::string& text,
                 const std::string& finish_reason, bool role_chunk = false,
                 Json logprobs = nullptr);
// The last chunk of include_usage: "choices": [] and the usage.
Json UsageChunk(Endpoint endpoint, const std::string& id, int64_t created,
                const std::string& model, const Usage& usage);

struct Choice {
  std::string text;
  std::string finish_reason;
  Json logprobs;  // LogprobsJson, or null
  // Chat: the calls parsed out of the answer (`text` is what remains;
  // message.content is null when that is empty and there are calls).
  Json tool_calls = Json::array();
};

// A tool call's JSON in a message: {"id", "type": "function", "function":
// {"name", "arguments"}}; in a stream delta with its "index" first.
Json ToolCallJson(const std::string& id, const std::string& name, const std::string& arguments,
                  std::optional<int> index = std::nullopt);
// A chat stream chunk whose delta carries tool calls.
Json ToolCallsChunk(const std::string& id, int64_t created, const std::string& model, int index,
                    Json tool_calls);
// The whole (non-streamed) response.
Json FullResponse(Endpoint endpoint, const std::string& id, int64_t created,
                  const std::string& model, const std::vector<Choice>& choices,
                  const Usage& usage);

// "data: <json>\n\n" (the JSON on one line, invalid UTF-8 replaced).
std::string SseEvent(const Json& json);
// The JSON on one line, invalid UTF-8 replaced by U+FFFD.
std::string Dump(const Json& json);

}  // namespace kvcast::openai

#endif  // KVCAST_SERVICES_OPENAI_OPENAI_PROTOCOL_H_
