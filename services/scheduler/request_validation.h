// ValidateRequest: a kvcast.v1.GenerateRequest checked against the served
// model and the scheduler's limits, turned into what the orchestration
// needs (the prompt's tokens and chunk hash chain, the sampling parameters,
// the limits). Pure: no workers, no clock; each refusal is
// INVALID_ARGUMENT naming the field and the bound it broke.
#ifndef KVCAST_SERVICES_SCHEDULER_REQUEST_VALIDATION_H_
#define KVCAST_SERVICES_SCHEDULER_REQUEST_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/kv/prefix_hash.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvcast/v1/generation.pb.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::scheduler {

struct ValidRequest {
  std::vector<int32_t> prompt;
  // The prompt's chunk hash chain, salted by its tenant (its chunks, index
  // entries and KV tracks are its own), and its KV track's digest.
  std::vector<Hash128> chain;
  std::string digest;
  v1::SamplingParams sampling;  // response_format.generated_tokens cleared (the scheduler's)
  int max_tokens = 0;
  std::vector<std::string> stops;
};

// `tokenizer` may be null (then only token-id prompts, and no stop
// strings); `grammars` compiles (and caches) a response_format to check it.
absl::StatusOr<ValidRequest> ValidateRequest(const v1::GenerateRequest& request,
                                             const ModelInfo& model, const Tokenizer* tokenizer,
                                             GrammarCache* grammars, int max_tokens_limit);

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_REQUEST_VALIDATION_H_
