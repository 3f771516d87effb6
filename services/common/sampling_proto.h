// kvcast.v1.SamplingParams -> the engine's SamplingParams (unset (0) top_p
// and repetition_penalty mean "off" (1), as generation.proto documents) and
// ResponseFormat; the engine's log-probabilities -> kvcast.v1.TokenLogprob.
#ifndef KVCAST_SERVICES_COMMON_SAMPLING_PROTO_H_
#define KVCAST_SERVICES_COMMON_SAMPLING_PROTO_H_

#include <algorithm>

#include "engine/grammar/grammar_cache.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "kvcast/v1/generation.pb.h"

namespace kvcast::services {

inline SamplingParams SamplingFromProto(const v1::SamplingParams& s) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p() == 0 ? 1.f : s.top_p();
  p.repetition_penalty = s.repetition_penalty() == 0 ? 1.f : s.repetition_penalty();
  p.seed = s.seed();
  p.frequency_penalty = s.frequency_penalty();
  p.presence_penalty = s.presence_penalty();
  p.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  std::sort(p.logit_bias.begin(), p.logit_bias.end());  // a map's order is not fixed
  return p;
}

inline ResponseFormat ResponseFormatFromProto(const v1::SamplingParams& s) {
  ResponseFormat f;
  switch (s.response_format().type()) {
    case v1::ResponseFormat::RESPONSE_FORMAT_JSON_OBJECT:
      f.type = ResponseFormat::Type::kJsonObject;
      break;
    case v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA:
      f.type = ResponseFormat::Type::kJsonSchema;
      break;
    case v1::ResponseFormat::RESPONSE_FORMAT_REGEX:
      f.type = ResponseFormat::Type::kRegex;
      break;
    case v1::ResponseFormat::RESPONSE_FORMAT_CHOICE:
      f.type = ResponseFormat::Type::kChoice;
      break;
    case v1::ResponseFormat::RESPONSE_FORMAT_GRAMMAR:
      f.type = ResponseFormat::Type::kGrammar;
      break;
    default:
      break;
  }
  f.json_schema = s.response_format().json_schema();
  f.regex = s.response_format().regex();
  f.grammar = s.response_format().grammar();
  f.json_prefix = s.response_format().json_prefix();
  f.json_suffix = s.response_format().json_suffix();
  f.prefix_token = s.response_format().prefix_token();
  f.choices.assign(s.response_format().choices().begin(), s.response_format().choices().end());
  f.generated_tokens = s.response_format().generated_tokens();
  return f;
}

// The engine's per-token log-probabilities, for the wire.
inline v1::TokenLogprob LogprobToProto(const TokenLogprob& lp) {
  v1::TokenLogprob out;
  out.set_logprob(lp.logprob);
  for (const auto& [id, logprob] : lp.top) {
    out.add_top_ids(id);
    out.add_top_logprobs(logprob);
  }
  return out;
}

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_SAMPLING_PROTO_H_
