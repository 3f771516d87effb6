#include "services/openai/openai_frontend.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "kvcast/v1/generation.grpc.pb.h"

namespace kvcast::openai {
namespace {

using services::HttpExchange;
using services::HttpRequest;

// `tenant_limit`: the scheduler refused the tenant (over its quota), not
// the service as a whole: 429 instead of 503.
ApiError FromGrpc(const grpc::Status& s, bool tenant_limit, const std::string& retry_after) {
  ApiError e;
  e.message = s.error_message();
  e.retry_after = retry_after.empty() ? "1" : retry_after;
  if (s.error_code() == grpc::RESOURCE_EXHAUSTED && tenant_limit) {
    e.status = 429;
    e.type = "rate_limit_error";
    e.code = "rate_limit_exceeded";
    return e;
  }
  switch (s.error_code()) {
    case grpc::INVALID_ARGUMENT:
    case grpc::OUT_OF_RANGE:
    case grpc::FAILED_PRECONDITION:
      e.status = 400;
      if (absl::StartsWith(e.message, "response_format: ")) e.param = "response_format";
      break;
    case grpc::NOT_FOUND:
      e.status = 404;
      break;
    case grpc::UNAUTHENTICATED:
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case grpc::PERMISSION_DENIED:
      e.status = 403;
      e.type = "permission_error";
      break;
    case grpc::RESOURCE_EXHAUSTED:
    case grpc::UNAVAILABLE:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    case grpc::DEADLINE_EXCEEDED:
      e.status = 504;
      e.type = "timeout";
      break;
    case grpc::CANCELLED:
      e.status = 499;
      e.type = "cancelled";
      break;
    default:
      e.status = 500;
      e.type = "internal_error";
  }
  return e;
}

void SendError(HttpExchange* ex, const ApiError& e) {
  services::HttpHeaders h;
  if (e.status == 503 || e.status == 429) {
    h.emplace_back("Retry-After", e.retry_after.empty() ? "1" : e.retry_after);
  }
  if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
  ex->Respond(e.status, "application/json", e.Body(), h);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One HTTP request in flight: its Generation calls (one per candidate:
// n a prompt, or best_of) report here; the answer is written once every
// call is done (or, streaming, as messages arrive).
class Job : public std::enable_shared_from_this<Job> {
 public:
  Job(CompletionRequest req, std::shared_ptr<HttpExchange> ex, std::string model, int calls,
      const Tokenizer* tokenizer, ToolCallFormat tool_format)
      : req_(std::move(req)),
        per_prompt_(std::max(req_.n, req_.best_of)),
        ex_(std::move(ex)),
        tokenizer_(tokenizer),
        tools_(req_.endpoint == Endpoint::kChat &&
               req_.tool_choice != CompletionRequest::ToolChoice::kNone),
        tool_format_(tool_format),
        id_(NewResponseId(req_.endpoint)),
        created_(UnixNow()),
        model_(std::move(model)),
        choices_(size_t(calls)) {}

  class Call;
  void Start(v1::Generation::Stub* stub, std::vector<v1::GenerateRequest> requests,
             const std::string& authorization);

  void OnMessage(int index, const v1::GenerateResponse& r) {
    std::vector<std::shared_ptr<Call>> now;
    {
      absl::MutexLock l(&mu_);
      HandleLocked(index, r);
      // The prompt's first candidate has computed it: the others start,
      // taking its KV from the cache and its log-probabilities from here.
      const size_t p = size_t(index / per_prompt_);
      if (p < deferred_.size() && prompt_logprobs_[p]) now.swap(deferred_[p]);
    }
    StartCalls(now);
  }

  // Whether candidate `index` echoes log-probabilities its prompt's first
  // candidate computes (and so starts once they are in: the prompt is
  // computed once, not again without its cached KV).
  bool SharesPromptLogprobs(int index) const {
    return req_.echo && req_.logprobs && index % per_prompt_ != 0;
  }

  void HandleLocked(int index, const v1::GenerateResponse& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ChoiceState& c = choices_[size_t(index)];
    if (r.has_delta()) {
      const v1::Delta& d = r.delta();
      if (req_.echo && !c.echoed) EchoLocked(index, d);
      if (EchoOnly()) return;  // the one token made on the way is not asked for
      c.completion_tokens += d.token_ids_size();
      if (d.prompt_tokens() > 0) {
        c.prompt_tokens = d.prompt_tokens();
        c.cached_tokens = d.cached_prompt_tokens();
      }
      for (int i = 0; i < d.logprobs_size() && i < d.token_ids_size(); ++i) {
        c.cumulative_logprob += d.logprobs(i).logprob();
        if (req_.logprobs) c.logprobs.push_back(Readable(d.token_ids(i), d.logprobs(i)));
      }
      if (!req_.stream) {
        c.text += d.text();
        return;
      }
      StartStreamLocked();
      // A token whose text is held back (a stop string may be starting, or
      // a character is incomplete, or a tool call may be) has its logprobs
      // sent with the next text.
      if (tools_) {
        c.text += d.text();
        const size_t start = ToolCallStart(tool_format_, c.text);
        if (start > c.text_sent) {
          SendChunkLocked(index, c.text.substr(c.text_sent, start - c.text_sent), "");
          c.text_sent = start;
        }
        return;
      }
      if (!d.text().empty()) SendChunkLocked(index, d.text(), "");
    } else if (r.has_final()) {
      const v1::Final& f = r.final();
      c.finish = f.finish_reason() == v1::FINISH_REASON_STOP ? "stop" : "length";
      c.prompt_tokens = f.usage().prompt_tokens();
      c.cached_tokens = f.usage().cached_prompt_tokens();
      c.completion_tokens = f.usage().generated_tokens();
      if (EchoOnly()) {
        c.finish = "length";
        c.completion_tokens = 0;
      }
      if (req_.stream) {
        StartStreamLocked();
        if (tools_) {  // what was held back: text, and the calls in it
          ParsedToolCalls parsed = ParseToolCalls(tool_format_, c.text.substr(c.text_sent));
          if (parsed.content) SendChunkLocked(index, *parsed.content, "");
          if (!parsed.calls.empty()) {
            Json calls = Json::array();
            for (size_t k = 0; k < parsed.calls.size(); ++k) {
              const ToolCall& t = parsed.calls[k];
              calls.push_back(ToolCallJson(t.id, t.name, t.arguments, int(k)));
            }
            SendJsonLocked(ToolCallsChunk(id_, created_, model_, index, std::move(calls)));
            if (c.finish == "stop") c.finish = "tool_calls";
          }
        }
        SendChunkLocked(index, "", c.finish);
      }
    }
  }

  // `trailers`: the call's trailing metadata (kvcast-limit, retry-after).
  void OnDone(int index, const grpc::Status& s,
              const std::multimap<grpc::string_ref, grpc::string_ref>& trailers) {
    absl::MutexLock l(&mu_);
    // A first candidate that ended without its prompt's log-probabilities
    // (an error): the others never start; they count as done.
    const size_t p = size_t(index / per_prompt_);
    if (index % per_prompt_ == 0 && p < deferred_.size() && !deferred_[p].empty()) {
      done_ += deferred_[p].size();
      deferred_[p].clear();
    }
    if (!s.ok() && !error_) {
      auto get = [&](const char* key) {
        auto it = trailers.find(key);
        return it == trailers.end() ? std::string() : std::string(it->second.data(), it->second.size());
      };
      error_ = FromGrpc(s, get("kvcast-limit") == "tenant", get("retry-after"));
    }
    if (++done_ < choices_.size()) {
      if (error_) CancelLocked();
      return;
    }
    Usage usage = TotalLocked();
    if (!req_.stream) {
      if (error_) return SendError(ex_.get(), *error_);
      std::vector<Choice> out;
      for (size_t i : ReturnedLocked()) {
        const ChoiceState& c = choices_[i];
        out.push_back({c.text, c.finish, LogprobsJson(req_.endpoint, c.logprobs, 0, req_.logprobs)});
        if (!tools_) continue;
        ParsedToolCalls parsed = ParseToolCalls(tool_format_, c.text);
        if (parsed.calls.empty()) continue;
        out.back().text = parsed.content.value_or("");
        for (const ToolCall& t : parsed.calls) {
          out.back().tool_calls.push_back(ToolCallJson(t.id, t.name, t.arguments));
        }
        if (c.finish == "stop") out.back().finish_reason = "tool_calls";
      }
      ex_->Respond(200, "application/json",
                   Dump(FullResponse(req_.endpoint, id_, created_, model_, out, usage)));
      return;
    }
    if (error_ && !started_) return SendError(ex_.get(), *error_);
    StartStreamLocked();
    if (error_) {
      ex_->Send(SseEvent(Json::parse(error_->Body())));
    } else if (req_.include_usage) {
      ex_->Send(SseEvent(UsageChunk(req_.endpoint, id_, created_, model_, usage)));
    }
    ex_->Send("data: [DONE]\n\n");
    ex_->Finish();
  }

  // The client went away: stop every call (their workers free the pages).
  void Cancel() {
    absl::MutexLock l(&mu_);
    CancelLocked();
  }

 private:
  struct ChoiceState {
    bool echoed = false;  // with echo: the prompt went first (streaming: was sent)
    std::string text;  // the answer so far (streaming: only with tools, for ToolCallStart)
    size_t text_sent = 0;  // streaming with tools: of `text`, sent as content
    std::string finish;
    int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    double cumulative_logprob = 0;  // of the tokens so far (with logprobs or best_of)
    // With logprobs: every token's (not streaming), or those not sent yet.
    std::vector<TokenLogprobs> logprobs;
    int logprob_chars = 0;  // characters of the tokens whose logprobs were sent
  };

  // A token id as the API shows it: its bytes, or "token_id:N" without a tokenizer.
  std::string TokenText(int32_t id) const {
    if (tokenizer_ == nullptr || id < 0 || id >= tokenizer_->vocab_size()) {
      return absl::StrCat("token_id:", id);
    }
    return tokenizer_->Decode({&id, 1}, /*skip_special=*/false);
  }

  TokenLogprobs Readable(int32_t token, const v1::TokenLogprob& lp) const {
    TokenLogprobs out;
    out.bytes = TokenText(token);
    out.logprob = lp.logprob();
    for (int k = 0; k < lp.top_ids_size() && k < lp.top_logprobs_size(); ++k) {
      out.top.emplace_back(TokenText(lp.top_ids(k)), lp.top_logprobs(k));
    }
    return out;
  }

  // echo with max_tokens 0: the prompt alone (one token is generated, not shown).
  bool EchoOnly() const { return req_.echo && req_.max_tokens && *req_.max_tokens == 0; }

  // With echo, at the choice's first delta: its prompt's text (and with
  // logprobs, its tokens', from the delta's prompt_logprobs) before all else.
  void EchoLocked(int index, const v1::Delta& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ChoiceState& c = choices_[size_t(index)];
    c.echoed = true;
    const std::vector<int32_t>& ids = prompt_ids_[size_t(index)];
    const Prompt& prompt = req_.prompts[size_t(index / per_prompt_)];
    std::string text;
    if (prompt.text) {
      text = *prompt.text;
    } else {
      for (int32_t id : ids) text += TokenText(id);
    }
    if (req_.logprobs) {
      std::optional<std::vector<TokenLogprobs>>& shared = prompt_logprobs_[size_t(index / per_prompt_)];
      if (!shared) {  // the prompt's first candidate: they come with its delta
        shared.emplace();
        for (size_t k = 0; k < ids.size(); ++k) {
          if (k > 0 && int(k) <= d.prompt_logprobs_size()) {
            shared->push_back(Readable(ids[k], d.prompt_logprobs(int(k) - 1)));
          } else {
            shared->push_back({TokenText(ids[k]), 0, {}, /*none=*/true});
          }
        }
      }
      c.logprobs.insert(c.logprobs.begin(), shared->begin(), shared->end());
    }
    if (!req_.stream) {
      c.text = std::move(text);
      return;
    }
    StartStreamLocked();
    SendChunkLocked(index, text, "");
  }

  // The candidates answered, in choice order: all of them, or with best_of
  // each prompt's n of highest cumulative log-probability (ties: the first).
  std::vector<size_t> ReturnedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<size_t> out(choices_.size());
    std::iota(out.begin(), out.end(), size_t(0));
    if (per_prompt_ == req_.n) return out;
    std::vector<size_t> best;
    for (auto first = out.begin(); first != out.end(); first += per_prompt_) {
      std::stable_sort(first, first + per_prompt_, [&](size_t a, size_t b) {
        return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
      });
      best.insert(best.end(), first, first + req_.n);
    }
    return best;
  }

  Usage TotalLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Usage u;
    for (size_t i = 0; i < choices_.size(); ++i) {
      const ChoiceState& c = choices_[i];
      u.completion_tokens += c.completion_tokens;  // every candidate's, as OpenAI bills best_of
      if (i % size_t(per_prompt_) != 0) continue;  // a prompt counts once, not per choice
      u.prompt_tokens += c.prompt_tokens;
      u.cached_tokens += c.cached_tokens;
    }
    return u;
  }

  // Headers go out with the first message, so that errors found before any
  // token (validation, admission) are plain HTTP errors.
  void StartStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (started_) return;
    started_ = true;
    ex_->StartStream(200, "text/event-stream; charset=utf-8");
    if (req_.endpoint == Endpoint::kChat) {
      for (size_t i = 0; i < choices_.size(); ++i) {
        SendJsonLocked(StreamChunk(req_.endpoint, id_, created_, model_, int(i), "", "",
                                   /*role_chunk=*/true));
      }
    }
  }

  // The chunk carries the logprobs of the choice's tokens not sent yet.
  void SendChunkLocked(int index, const std::string& text, const std::string& finish)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ChoiceState& c = choices_[size_t(index)];
    Json logprobs = nullptr;
    if (req_.logprobs) {
      // Null when no token's logprobs are due (a finish after sent text).
      logprobs = LogprobsJson(req_.endpoint, c.logprobs, c.logprob_chars, /*requested=*/false);
      for (const TokenLogprobs& t : c.logprobs) c.logprob_chars += Utf8Chars(t.bytes);
      c.logprobs.clear();
    }
    SendJsonLocked(StreamChunk(req_.endpoint, id_, created_, model_, index, text, finish,
                               /*role_chunk=*/false, std::move(logprobs)));
  }

  void SendJsonLocked(Json chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (req_.continuous_usage_stats) chunk["usage"] = TotalLocked().ToJson();
    ex_->Send(SseEvent(chunk));
  }

  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCalls(const std::vector<std::shared_ptr<Call>>& calls);

  const CompletionRequest req_;
  const int per_prompt_;  // calls a prompt: n, or best_of
  const std::shared_ptr<HttpExchange> ex_;
  const Tokenizer* const tokenizer_;  // may be null
  const bool tools_;                  // chat with tool_choice other than none: calls are parsed out
  const ToolCallFormat tool_format_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  absl::Mutex mu_;
  std::vector<ChoiceState> choices_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int32_t>> prompt_ids_;  // with echo: each call's prompt (set by Start)
  // With echo and logprobs: each prompt's tokens' log-probabilities, once
  // its first candidate's first delta brought them (its other candidates
  // start then: deferred_).
  std::vector<std::optional<std::vector<TokenLogprobs>>> prompt_logprobs_ ABSL_GUARDED_BY(mu_);
  // Each prompt's candidates that start once its first one brought them.
  std::vector<std::vector<std::shared_ptr<Call>>> deferred_ ABSL_GUARDED_BY(mu_);
  v1::Generation::Stub* stub_ = nullptr;  // set by Start
  std::string authorization_;
  std::vector<std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ApiError> error_ ABSL_GUARDED_BY(mu_);
};

// One Generation call. It holds itself (and its job) until gRPC reports it
// done, as gRPC's callback reactors require.
class Job::Call final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Call(std::shared_ptr<Job> job, int index, v1::GenerateRequest request)
      : job_(std::move(job)), index_(index), request_(std::move(request)) {}

  void Start(v1::Generation::Stub* stub, const std::string& authorization,
             std::shared_ptr<Call> self) {
    self_ = std::move(self);
    if (!authorization.empty()) context_.AddMetadata("authorization", authorization);
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void TryCancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    job_->OnMessage(index_, response_);
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& s) override {
    auto self = std::move(self_);
    auto job = std::move(job_);
    job->OnDone(index_, s, context_.GetServerTrailingMetadata());
  }

 private:
  std::shared_ptr<Job> job_;
  const int index_;
  grpc::ClientContext context_;
  const v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  std::shared_ptr<Call> self_;
};

void Job::Start(v1::Generation::Stub* stub, std::vector<v1::GenerateRequest> requests,
                const std::string& authorization) {
  std::vector<std::shared_ptr<Call>> calls;
  for (size_t i = 0; req_.echo && i < requests.size(); ++i) {
    const auto& ids = requests[i].token_ids().ids();
    prompt_ids_.emplace_back(ids.begin(), ids.end());
  }
  stub_ = stub;
  authorization_ = authorization;
  for (size_t i = 0; i < requests.size(); ++i) {
    calls.push_back(std::make_shared<Call>(shared_from_this(), int(i), std::move(requests[i])));
  }
  std::vector<std::shared_ptr<Call>> now;
  {
    absl::MutexLock l(&mu_);
    calls_ = calls;
    prompt_logprobs_.resize(calls.size() / size_t(per_prompt_));
    deferred_.resize(prompt_logprobs_.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      if (SharesPromptLogprobs(int(i))) {
        deferred_[i / size_t(per_prompt_)].push_back(calls[i]);
      } else {
        now.push_back(calls[i]);
      }
    }
  }
  std::weak_ptr<Job> weak = shared_from_this();
  ex_->OnClose([weak] {
    if (auto job = weak.lock()) job->Cancel();
  });
  StartCalls(now);
}

void Job::StartCalls(const std::vector<std::shared_ptr<Call>>& calls) {
  for (const auto& c : calls) c->Start(stub_, authorization_, c);
}

void Job::CancelLocked() {
  // TryCancel may run gRPC reactions before it returns; they take mu_, so
  // cancel outside the lock on calls kept alive by the copies.
  auto calls = calls_;
  mu_.Unlock();
  for (auto& c : calls) c->TryCancel();
  mu_.Lock();
}

}  // namespace

class OpenAiFrontend::Impl {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, const Tokenizer* tokenizer,
       const services::ApiKeys* keys, services::MetricsRegistry* metrics, FrontendHooks hooks,
       FrontendOptions options)
      : stub_(v1::Generation::NewStub(channel)),
        tokenizer_(tokenizer),
        keys_(keys),
        hooks_(std::move(hooks)),
        options_(options) {
    for (const char* route : {"completions", "chat", "models", "other"}) {
      requests_.push_back(metrics->AddCounter("kvcast_http_requests_total",
                                              "HTTP API requests by route", {{"route", route}}));
    }
    errors_ = metrics->AddCounter("kvcast_http_errors_total", "HTTP API requests answered 4xx/5xx");
  }

  void Handle(HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    const std::string& p = req.path;
    if (p == "/health") {
      const bool ready = hooks_.ready && hooks_.ready();
      return ex->Respond(ready ? 200 : 503, "text/plain", ready ? "ok\n" : "no worker can serve\n");
    }
    if (p == "/metrics") {
      return ex->Respond(200, "text/plain; version=0.0.4; charset=utf-8",
                         hooks_.metrics ? hooks_.metrics() : "");
    }
    const bool models = p == "/v1/models", completions = p == "/v1/completions",
               chat = p == "/v1/chat/completions";
    // vLLM's token routes (no /v1 prefix, as vLLM serves them).
    const bool tokenize = p == "/tokenize", detokenize = p == "/detokenize";
    requests_[models ? 2 : completions ? 0 : chat ? 1 : 3]->Increment();
    auto fail = [&](ApiError e) {
      errors_->Increment();
      SendError(ex.get(), e);
    };
    if (!models && !completions && !chat && !tokenize && !detokenize) {
      ApiError e{404, absl::StrCat("no route ", req.method, " ", p), "invalid_request_error"};
      return fail(e);
    }
    const std::string authorization = req.Header("authorization");
    if (keys_ != nullptr && keys_->enabled() && !keys_->TenantOf(authorization)) {
      ApiError e{401, authorization.empty() ? "an API key is required (Authorization: Bearer KEY)"
                                            : "invalid API key",
                 "authentication_error", "", "invalid_api_key"};
      return fail(e);
    }
    const std::string want = models ? "GET" : "POST";
    if (req.method != want) {
      ApiError e{405, absl::StrCat(p, " takes ", want), "invalid_request_error"};
      return fail(e);
    }
    std::optional<ServedModel> served = hooks_.model ? hooks_.model() : std::nullopt;
    if (models) {
      Json data = Json::array();
      if (served) {
        data.push_back({{"id", served->name},
                        {"object", "model"},
                        {"created", start_time_},
                        {"owned_by", "kvcast"},
                        {"root", served->name},
                        {"max_model_len", served->max_model_len}});
      }
      return ex->Respond(200, "application/json", Dump(Json{{"object", "list"}, {"data", data}}));
    }
    // Parsing, chat-template rendering and tokenization take time that grows
    // with the request (a long prompt: milliseconds): off the I/O thread,
    // whose other connections' writes would wait for it.
    auto shared = std::make_shared<HttpRequest>(std::move(req));
    auto work = [this, chat, tokenize, detokenize, shared, ex, authorization, served] {
      if (tokenize || detokenize) return Tokens(detokenize, *shared, ex, served);
      Generate(chat, *shared, ex, authorization, served);
    };
    if (work_ == nullptr) {
      work();
    } else if (!work_->Post(std::move(work))) {
      errors_->Increment();
      SendError(ex.get(), {503, "the server is overloaded (requests waiting to be tokenized)",
                           "service_unavailable"});
    }
  }

 private:
  // POST /tokenize ({"prompt": TEXT} or {"messages": [...]}, as vLLM takes
  // them) and /detokenize ({"tokens": [IDS]}).
  void Tokens(bool detokenize, const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
              std::optional<ServedModel> served) {
    auto fail = [&](ApiError e) {
      errors_->Increment();
      SendError(ex.get(), e);
    };
    const Json j = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return fail({400, "the body is not a JSON object"});
    if (!served) {
      return fail({503, "no worker has registered with the scheduler yet", "service_unavailable"});
    }
    if (auto m = j.find("model"); m != j.end() && !m->is_null() &&
                                  (!m->is_string() || m->get<std::string>() != served->name)) {
      return fail({404, absl::StrCat("the model ", m->dump(), " does not exist; this server serves '",
                                     served->name, "'"),
                   "invalid_request_error", "model", "model_not_found"});
    }
    if (tokenizer_ == nullptr) return fail({400, "this scheduler has no tokenizer (--model)"});
    auto flag = [&](const char* name, bool fallback) -> std::optional<bool> {
      auto it = j.find(name);
      if (it == j.end() || it->is_null()) return fallback;
      if (!it->is_boolean()) return std::nullopt;
      return it->get<bool>();
    };
    if (detokenize) {
      auto t = j.find("tokens");
      if (t == j.end() || !t->is_array()) {
        return fail({400, "tokens: an array of token ids is required", "invalid_request_error",
                     "tokens"});
      }
      std::vector<int32_t> ids;
      for (const Json& v : *t) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            v.get<int64_t>() >= tokenizer_->vocab_size()) {
          return fail({400, absl::StrCat("tokens: ", v.dump(), " is not a token id of this model (0-",
                                         tokenizer_->vocab_size() - 1, ")"),
                       "invalid_request_error", "tokens"});
        }
        ids.push_back(int32_t(v.get<int64_t>()));
      }
      return ex->Respond(200, "application/json",
                         Dump(Json{{"prompt", tokenizer_->Decode(ids, /*skip_special=*/false)}}));
    }
    if (flag("return_token_strs", false) != false) {
      return fail({400, "return_token_strs is not supported", "invalid_request_error",
                   "return_token_strs"});
    }
    const bool chat = j.contains("messages");
    // vLLM's defaults: special tokens (BOS) added to a prompt, not to a
    // rendered chat (its template writes them); a chat ends with the
    // assistant's turn opened.
    const std::optional<bool> special = flag("add_special_tokens", !chat);
    const std::optional<bool> generation = flag("add_generation_prompt", true);
    if (!special || !generation) {
      return fail({400, "add_special_tokens and add_generation_prompt must be booleans"});
    }
    std::string text;
    if (chat) {
      if (!j["messages"].is_array()) {
        return fail({400, "messages: an array is required", "invalid_request_error", "messages"});
      }
      if (!hooks_.render_chat) {
        return fail({400, "this model has no chat template; send a prompt", "invalid_request_error",
                     "messages"});
      }
      auto rendered = hooks_.render_chat(j["messages"], j.value("tools", Json()), *generation,
                                         j.value("chat_template_kwargs", Json()));
      if (!rendered.ok()) {
        return fail({400, absl::StrCat("chat template: ", rendered.status().message()),
                     "invalid_request_error", "messages"});
      }
      text = *std::move(rendered);
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      text = j["prompt"].get<std::string>();
    } else {
      return fail({400, "either prompt (a string) or messages is required", "invalid_request_error",
                   "prompt"});
    }
    auto ids = tokenizer_->Encode(text, /*add_bos=*/*special);
    if (!ids.ok()) {
      return fail({400, std::string(ids.status().message()), "invalid_request_error",
                   chat ? "messages" : "prompt"});
    }
    ex->Respond(200, "application/json",
                Dump(Json{{"count", ids->size()},
                          {"max_model_len", served->max_model_len},
                          {"tokens", *ids}}));
  }

  void Generate(bool chat, const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
                const std::string& authorization, std::optional<ServedModel> served) {
    auto fail = [&](ApiError e) {
      errors_->Increment();
      SendError(ex.get(), e);
    };
    CompletionRequest creq;
    if (auto e = ParseRequest(chat ? Endpoint::kChat : Endpoint::kCompletions, req.body, &creq)) {
      return fail(*e);
    }
    if (!served) {
      return fail({503, "no worker has registered with the scheduler yet", "service_unavailable"});
    }
    if (!creq.model.empty() && creq.model != served->name) {
      return fail({404, absl::StrCat("the model '", creq.model, "' does not exist; this server serves '",
                                     served->name, "'"),
                   "invalid_request_error", "model", "model_not_found"});
    }
    std::vector<std::vector<int32_t>> prompts;
    if (auto e = Tokenize(creq, *served, &prompts)) return fail(*e);
    std::vector<v1::GenerateRequest> calls;
    static thread_local std::mt19937_64 seeds{std::random_device{}()};
    const int candidates = std::max(creq.n, creq.best_of);
    for (auto& ids : prompts) for (int choice = 0; choice < candidates; ++choice) {
      v1::GenerateRequest g;
      *g.mutable_token_ids()->mutable_ids() = {ids.begin(), ids.end()};
      v1::SamplingParams* s = g.mutable_sampling();
      s->set_temperature(float(creq.temperature));
      s->set_top_k(creq.top_k);
      s->set_top_p(float(creq.top_p));
      s->set_repetition_penalty(float(creq.repetition_penalty));
      s->set_frequency_penalty(float(creq.frequency_penalty));
      s->set_presence_penalty(float(creq.presence_penalty));
      for (const auto& [id, bias] : creq.logit_bias) (*s->mutable_logit_bias())[id] = bias;
      // As vLLM: a given seed makes the choices reproducible (seed + i per
      // choice); none, a random one each.
      s->set_seed(creq.seed ? *creq.seed + uint64_t(choice) : seeds());
      const int room = served->max_model_len - int(ids.size());
      // echo with max_tokens 0: the prompt's pass makes one token anyway (not shown).
      g.set_max_tokens(creq.max_tokens ? std::max(1, *creq.max_tokens)
                       : chat          ? std::max(1, std::min(room, options_.max_tokens_limit))
                                       : 16);
      s->set_min_tokens(creq.min_tokens);
      // best_of ranks the candidates by their tokens' log-probabilities.
      s->set_logprobs(creq.logprobs || candidates > creq.n);
      s->set_top_logprobs(creq.top_logprobs);
      // A prompt's first candidate brings its log-probabilities for all
      // (OnMessage): the others reuse its KV instead of computing it again.
      s->set_prompt_logprobs(creq.echo && creq.logprobs && choice == 0);
      if (creq.format == CompletionRequest::Format::kJsonObject) {
        s->mutable_response_format()->set_type(v1::ResponseFormat::RESPONSE_FORMAT_JSON_OBJECT);
      } else if (creq.format == CompletionRequest::Format::kJsonSchema) {
        s->mutable_response_format()->set_type(v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA);
        s->mutable_response_format()->set_json_schema(creq.json_schema);
      } else if (creq.format == CompletionRequest::Format::kGrammar) {
        s->mutable_response_format()->set_type(v1::ResponseFormat::RESPONSE_FORMAT_GRAMMAR);
        s->mutable_response_format()->set_grammar(creq.grammar);
      } else if (creq.format == CompletionRequest::Format::kRegex) {
        s->mutable_response_format()->set_type(v1::ResponseFormat::RESPONSE_FORMAT_REGEX);
        s->mutable_response_format()->set_regex(creq.regex);
      } else if (creq.tool_choice == CompletionRequest::ToolChoice::kRequired ||
                 creq.tool_choice == CompletionRequest::ToolChoice::kNamed) {
        const ForcedToolCall forced = ForcedToolCallOf(hooks_.tool_call_format, creq.tools, creq.tool_name);
        v1::ResponseFormat* f = s->mutable_response_format();
        f->set_type(v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA);
        f->set_json_schema(forced.schema);
        f->set_json_prefix(forced.prefix);
        f->set_json_suffix(forced.suffix);
        f->set_prefix_token(forced.prefix_token);
      } else if (creq.format == CompletionRequest::Format::kChoice) {
        s->mutable_response_format()->set_type(v1::ResponseFormat::RESPONSE_FORMAT_CHOICE);
        *s->mutable_response_format()->mutable_choices() = {creq.choices.begin(), creq.choices.end()};
      }
      for (const std::string& stop : creq.stop) g.add_stop(stop);
      g.mutable_stop_token_ids()->Add(creq.stop_token_ids.begin(), creq.stop_token_ids.end());
      g.set_ignore_eos(creq.ignore_eos);
      calls.push_back(std::move(g));
    }
    auto job = std::make_shared<Job>(std::move(creq), ex, served->name, int(calls.size()),
                                     tokenizer_, hooks_.tool_call_format);
    job->Start(stub_.get(), std::move(calls), authorization);
  }

  std::optional<ApiError> Tokenize(const CompletionRequest& req, const ServedModel& served,
                                   std::vector<std::vector<int32_t>>* out) const {
    if (req.endpoint == Endpoint::kChat) {
      if (!hooks_.render_chat) {
        return ApiError{400, "this model has no chat template; use /v1/completions",
                        "invalid_request_error", "messages"};
      }
      auto text = hooks_.render_chat(req.messages, req.tools, req.add_generation_prompt,
                                     req.chat_template_kwargs);
      if (!text.ok()) {
        return ApiError{400, absl::StrCat("chat template: ", text.status().message()),
                        "invalid_request_error", "messages"};
      }
      if (tokenizer_ == nullptr) {
        return ApiError{400, "this scheduler has no tokenizer (--model)", "invalid_request_error"};
      }
      // The template writes any BOS itself.
      auto ids = tokenizer_->Encode(*text, /*add_bos=*/false);
      if (!ids.ok()) return ApiError{400, std::string(ids.status().message()), "invalid_request_error", "messages"};
      out->push_back(std::move(*ids));
    } else {
      for (const Prompt& p : req.prompts) {
        if (!p.text) {
          out->push_back(p.ids);
          continue;
        }
        if (tokenizer_ == nullptr) {
          return ApiError{400, "this scheduler has no tokenizer (--model); send token ids",
                          "invalid_request_error", "prompt"};
        }
        auto ids = tokenizer_->Encode(*p.text, /*add_bos=*/true);
        if (!ids.ok()) return ApiError{400, std::string(ids.status().message()), "invalid_request_error", "prompt"};
        out->push_back(std::move(*ids));
      }
    }
    for (const auto& ids : *out) {
      if (int(ids.size()) >= served.max_model_len) {
        return ApiError{400,
                        absl::StrCat("this model's maximum context length is ", served.max_model_len,
                                     " tokens; the prompt has ", ids.size()),
                        "invalid_request_error",
                        req.endpoint == Endpoint::kChat ? "messages" : "prompt"};
      }
    }
    return std::nullopt;
  }

  const std::unique_ptr<v1::Generation::Stub> stub_;
  const Tokenizer* const tokenizer_;
  const services::ApiKeys* const keys_;
  const FrontendHooks hooks_;
  const FrontendOptions options_;
  const int64_t start_time_ = UnixNow();
  std::vector<services::Counter*> requests_;
  services::Counter* errors_;
  // Last: destroyed (its queue run, its threads joined) before the rest.
  // Null with work_threads 0.
  std::unique_ptr<services::WorkPool> work_ =
      options_.work_threads > 0
          ? std::make_unique<services::WorkPool>(options_.work_threads, options_.max_waiting)
          : nullptr;
};

OpenAiFrontend::OpenAiFrontend(std::shared_ptr<grpc::Channel> generation,
                               const Tokenizer* tokenizer, const services::ApiKeys* keys,
                               services::MetricsRegistry* metrics, FrontendHooks hooks,
                               FrontendOptions options)
    : impl_(std::make_unique<Impl>(std::move(generation), tokenizer, keys, metrics,
                                   std::move(hooks), options)) {}

OpenAiFrontend::~OpenAiFrontend() = default;

void OpenAiFrontend::Handle(services::HttpRequest request,
                            std::shared_ptr<services::HttpExchange> exchange) {
  impl_->Handle(std::move(request), std::move(exchange));
}

}  // namespace kvcast::openai
