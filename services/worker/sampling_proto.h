// kvcast.v1.SamplingParams -> the engine's SamplingParams. Unset (0) top_p
// and repetition_penalty mean "off" (1), as generation.proto documents.
#ifndef KVCAST_SERVICES_WORKER_SAMPLING_PROTO_H_
#define KVCAST_SERVICES_WORKER_SAMPLING_PROTO_H_

#include "engine/sampling/sampler.h"
#include "kvcast/v1/generation.pb.h"

namespace kvcast::worker {

inline SamplingParams SamplingFromProto(const v1::SamplingParams& s) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p() == 0 ? 1.f : s.top_p();
  p.repetition_penalty = s.repetition_penalty() == 0 ? 1.f : s.repetition_penalty();
  p.seed = s.seed();
  return p;
}

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_SAMPLING_PROTO_H_
