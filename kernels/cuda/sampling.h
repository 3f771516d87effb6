// Token sampling on the GPU: for each request, the token that
// kernels/token_picker.h's TokenPicker (the arithmetic of
// engine/sampling/Sampler::Sample without repetition penalty) picks from one
// row of logits, given the PRNG draw (drawn on the host, passed as `uniform`).
//
// Semantics (kernels/token_picker.h): NaN logits count as -inf. Greedy
// argmax (lowest index on ties) when temperature == 0, top_k == 1, or the
// largest logit is +-inf; out-of-range parameters are coerced as the
// Sampler's constructor does (bad temperature -> greedy, top_k < 0 -> off,
// top_p outside (0, 1] -> 1). Otherwise weights exp((logit - max) / T),
// top-k (exactly k; ties to the lower index; k >= vocab means off), top-p
// over the top-k set (the smallest prefix by descending probability whose
// mass reaches top_p times the set's mass, at least one token; without
// top-k, the Sampler's bucketed nucleus, whose draw order is index order for
// the tokens above the boundary bucket, then rank order), and the draw
// target = uniform * total against a running sum in the Sampler's candidate
// order, first running > target, falling back to the last positive weight.
//
// Exactness: the greedy path is exact. Stochastic paths follow the same
// order and comparisons, but may differ from the CPU in rounding-boundary
// cases: weights use a double-precision exp rounded to float where the CPU
// calls expf (they can differ by one float ulp in rare cases), and sums over
// more than the top-k-on-the-GPU cap (kSampleTopKCap) of candidates are
// formed in a different (fixed, deterministic) order than the CPU's left to
// right double sum. With top_k in [2, kSampleTopKCap] the candidate set,
// its order and every sum are the CPU's exactly (only the exp caveat
// applies). Results are deterministic run to run.
//
// With `allowed` (constrained decoding), the tokens whose bit is clear count
// as -inf, as TokenPicker::Load takes TokenSampling::allowed.
//
// logits: device [rows][vocab] float32; params, tokens: device arrays of
// `num` requests, tokens[j] picked from row params[j].row. The launcher
// enqueues on `stream`, neither allocates nor synchronizes, and returns the
// launch error. With vocab == 0 every token is -1.
#ifndef KVCAST_KERNELS_CUDA_SAMPLING_H_
#define KVCAST_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvcast {
namespace cuda {

struct SampleParams {
  int row;            // the logits row
  float temperature;  // 0: greedy
  int top_k;          // 0: off
  float top_p;        // 1: off
  double uniform;     // the Sampler's PRNG draw, in [0, 1)
  // Null, or device words of the tokens that may be picked: bit t of
  // allowed[t / 32] for token t.
  const uint32_t* allowed;
};

// top_k in [2, kSampleTopKCap] takes the fast, exact-order path (selection,
// then a sort of the candidates in shared memory); larger top_k, and top-p
// without top-k, use threshold searches over the whole vocabulary.
inline constexpr int kSampleTopKCap = 1024;

// Bytes of device workspace LaunchSample needs (one float per logit of
// each request).
size_t SampleWorkspaceBytes(int num, int vocab);

cudaError_t LaunchSample(const float* logits, int vocab, const SampleParams* params, int num,
                         void* workspace, int32_t* tokens, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_SAMPLING_H_
