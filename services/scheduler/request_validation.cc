#include "services/scheduler/request_validation.h"

#include "absl/strings/str_cat.h"
#include "engine/sampling/logprobs.h"
#include "services/common/sampling_proto.h"
#include "transport/kvcache/naming.h"

namespace kvcast::scheduler {
namespace {

absl::Status InVocabulary(const char* what, int32_t t, const ModelInfo& model) {
  if (t >= 0 && t < model.vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", t, " is outside the vocabulary [0, ", model.vocab_size, ")"));
}

absl::StatusOr<std::vector<int32_t>> PromptOf(const v1::GenerateRequest& req,
                                              const ModelInfo& model, const Tokenizer* tokenizer) {
  std::vector<int32_t> prompt;
  if (req.has_token_ids()) {
    prompt.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
    for (int32_t t : prompt) {
      if (absl::Status s = InVocabulary("token id", t, model); !s.ok()) return s;
    }
  } else if (req.prompt_case() == v1::GenerateRequest::kText) {
    if (tokenizer == nullptr) {
      return absl::InvalidArgumentError("this scheduler has no tokenizer (--model); send token_ids");
    }
    if (req.text().empty()) return absl::InvalidArgumentError("empty prompt");
    auto ids = tokenizer->Encode(req.text(), /*add_bos=*/true);
    if (!ids.ok()) return ids.status();
    prompt = std::move(*ids);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (int(prompt.size()) >= model.max_sequence_len) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                   " tokens; the model's context is ",
                                                   model.max_sequence_len));
  }
  return prompt;
}

absl::Status CheckSampling(const v1::SamplingParams& sampling, int max_tokens,
                           GrammarCache* grammars) {
  if (absl::Status s = services::SamplingFromProto(sampling).Validate(); !s.ok()) return s;
  if (sampling.top_logprobs() < 0 || sampling.top_logprobs() > kMaxTopLogprobs ||
      (sampling.top_logprobs() > 0 && !sampling.logprobs())) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs,
                                                   "] and wants logprobs, got ",
                                                   sampling.top_logprobs()));
  }
  if (auto g = grammars->Get(services::ResponseFormatFromProto(sampling)); !g.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("response_format: ", g.status().message()));
  }
  if (sampling.min_tokens() < 0 || sampling.min_tokens() > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens must be in [0, max_tokens = ",
                                                   max_tokens, "], got ", sampling.min_tokens()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidRequest> ValidateRequest(const v1::GenerateRequest& req,
                                             const ModelInfo& model, const Tokenizer* tokenizer,
                                             GrammarCache* grammars, int max_tokens_limit) {
  if (!req.model().empty() && req.model() != model.name) {
    return absl::InvalidArgumentError(absl::StrCat("unknown model \"", req.model(),
                                                   "\"; this service serves \"", model.name, "\""));
  }
  ValidRequest v;
  absl::StatusOr<std::vector<int32_t>> prompt = PromptOf(req, model, tokenizer);
  if (!prompt.ok()) return prompt.status();
  v.prompt = std::move(*prompt);
  v.max_tokens = req.max_tokens();
  if (v.max_tokens < 1 || v.max_tokens > max_tokens_limit) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be in [1, ", max_tokens_limit,
                                                   "], got ", v.max_tokens));
  }
  v.sampling = req.sampling();
  if (absl::Status s = CheckSampling(v.sampling, v.max_tokens, grammars); !s.ok()) return s;
  v.sampling.mutable_response_format()->set_generated_tokens(0);
  for (const std::string& s : req.stop()) {
    if (s.empty()) return absl::InvalidArgumentError("empty stop string");
    v.stops.push_back(s);
  }
  if (!v.stops.empty() && tokenizer == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer on the scheduler (--model)");
  }
  for (int32_t t : req.stop_token_ids()) {
    if (absl::Status s = InVocabulary("stop token id", t, model); !s.ok()) return s;
  }
  for (const auto& [t, bias] : v.sampling.logit_bias()) {
    if (absl::Status s = InVocabulary("logit_bias token id", t, model); !s.ok()) return s;
  }
  const Hash128 seed =
      req.tenant().empty() ? model.prefix_seed : PrefixSeed(model.fingerprint, req.tenant());
  v.chain = ChunkHashChain(seed, v.prompt, model.chunk_tokens);
  v.digest = kvcache::PromptDigest(seed, v.prompt, model.chunk_tokens).ToHex();
  return v;
}

}  // namespace kvcast::scheduler
