// The OpenAI-compatible HTTP API of the scheduler (docs/openai-api.md):
//
//   GET  /health               200, or 503 when no worker can serve
//   GET  /v1/models            the served model
//   POST /v1/completions       text or token-id prompts (one choice each)
//   POST /v1/chat/completions  messages rendered with the model's chat template
//   GET  /metrics              the scheduler's Prometheus text
//
// A /v1 request is parsed, rendered and tokenized on work threads of its
// own (FrontendOptions::work_threads), never on the HTTP I/O threads. Each
// request becomes kvcast.v1.Generation calls (one per prompt) on
// `generation` (the scheduler's in-process channel, so routing, admission,
// retries and metrics are the gRPC path's), made with gRPC's callback API:
// no thread waits per request. Tokens stream out as Server-Sent Events as
// vLLM writes them; a client that disconnects cancels its calls, which
// cancel the work on every worker. With API keys, /v1/* needs
// `Authorization: Bearer KEY` (401 otherwise) and the key travels with the
// call as gRPC metadata, where the Generation service maps it to its tenant.
//
// Thread safety: Handle may be called concurrently from any thread.
#ifndef KVCAST_SERVICES_OPENAI_OPENAI_FRONTEND_H_
#define KVCAST_SERVICES_OPENAI_OPENAI_FRONTEND_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/channel.h"
#include "services/common/api_keys.h"
#include "services/common/http_server.h"
#include "services/common/metrics.h"
#include "services/common/work_pool.h"
#include "services/openai/openai_protocol.h"
#include "services/openai/tool_calls.h"

namespace kvcast::openai {

struct ServedModel {
  std::string name;
  int max_model_len = 0;
};

struct FrontendHooks {
  // The served model; nullopt until a worker has registered.
  std::function<std::optional<ServedModel>()> model;
  // Whether a request could be served now (/health).
  std::function<bool()> ready;
  // The Prometheus text of /metrics.
  std::function<std::string()> metrics;
  // Renders chat messages (already validated: string contents) into the
  // prompt text; null when the model has no chat template (chat is then 400).
  std::function<absl::StatusOr<std::string>(const Json& messages, const Json& tools,
                                            bool add_generation_prompt, const Json& kwargs)>
      render_chat;
  // How the chat template has the model write tool calls (tool_calls.h).
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;
};

struct FrontendOptions {
  int max_tokens_limit = 4096;  // the scheduler's; caps chat's default max_tokens
  // Threads that parse, render and tokenize /v1 requests, off the HTTP I/O
  // threads (0: on them, where a long prompt's tokenization delays the
  // thread's other connections), and how many requests may wait for them
  // before a 503.
  int work_threads = 2;
  size_t max_waiting = 4096;
};

class OpenAiFrontend {
 public:
  // `tokenizer` (may be null: only token-id prompts then), `keys` and
  // `metrics` are borrowed and must outlive the frontend and its calls.
  OpenAiFrontend(std::shared_ptr<grpc::Channel> generation, const Tokenizer* tokenizer,
                 const services::ApiKeys* keys, services::MetricsRegistry* metrics,
                 FrontendHooks hooks, FrontendOptions options);
  ~OpenAiFrontend();

  void Handle(services::HttpRequest request, std::shared_ptr<services::HttpExchange> exchange);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvcast::openai

#endif  // KVCAST_SERVICES_OPENAI_OPENAI_FRONTEND_H_
