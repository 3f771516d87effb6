// Calibration: how fast a loaded model computes on its backend, measured at
// a worker's start-up and reported at registration, so a scheduler has the
// worker's rates (and scales its stall bounds by them) before it has timed a
// single request of its own.
//
//   auto c = Calibrate(model, &pool, /*chunk_tokens=*/128);
//   // c->chunk_ms: one 128-token prompt chunk from position 0
//   // c->step_ms: one decode step of one sequence after it
//
// The run borrows pages of `pool` (a chunk and a token; a pool too small for
// that runs the tokens it holds and scales the time to a chunk) and returns
// them; it must not overlap other use of the model (call it before
// the compute thread starts). Each measure is the median of a few repeats
// after a warm-up pass (first-touch of the workspace, lazy weight packing).
#ifndef KVCAST_ENGINE_CALIBRATION_H_
#define KVCAST_ENGINE_CALIBRATION_H_

#include "absl/status/statusor.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/transformer.h"

namespace kvcast {

struct Calibration {
  int chunk_tokens = 0;
  double chunk_ms = 0;  // prefill of chunk_tokens tokens at positions [0, chunk_tokens)
  double step_ms = 0;   // one decode token at position chunk_tokens
};

// FailedPrecondition when the pool has no room for 2 tokens; the model's
// errors otherwise.
absl::StatusOr<Calibration> Calibrate(Transformer& model, KvPagePool* pool, int chunk_tokens,
                                      int repeats = 3);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_CALIBRATION_H_
