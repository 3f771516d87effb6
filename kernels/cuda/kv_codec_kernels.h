// KV wire codecs on the GPU: encode float32 KV cache rows into the wire
// format of kernels/kv_codec.h and decode them back, bit-identical to the
// CPU reference EncodeKvRow / DecodeKvRow for all six formats (the math is
// kv_codec_math.h, shared with the host test that checks it byte for byte).
//
// Layout: `num_arrays` KV caches (e.g. each layer's K and V), array a at
// base + a * array_floats, each laid out [slot][num_heads][head_dim] float32,
// so one row (one token of one array) is num_heads * head_dim floats.
//
// Launchers enqueue on `stream`, neither allocate nor synchronize, and
// return the launch error (cudaSuccess when enqueued, or
// cudaErrorInvalidValue for a layout the format does not allow). All
// pointers are device memory. A negative slot skips its token: nothing is
// read or written for it.
#ifndef KVCAST_KERNELS_CUDA_KV_CODEC_KERNELS_H_
#define KVCAST_KERNELS_CUDA_KV_CODEC_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kv_codec.h"

namespace kvcast {
namespace cuda {

struct KvRowsLayout {
  int num_arrays;       // KV caches side by side
  size_t array_floats;  // floats from one array's base to the next's
  int num_heads;
  int head_dim;
  int block;         // values per scale (scaled formats); divides head_dim
  size_t row_bytes;  // KvRowBytes(format, num_heads, head_dim, block) (or more)
};

// For token t and array a, encodes row slots[t] of array a into
// out + t * out_stride + a * row_bytes. Rows of `out` may have any
// alignment.
cudaError_t LaunchEncodeKv(KvFormat format, const KvRowsLayout& layout, const float* base,
                           const int32_t* slots, int num_tokens, uint8_t* out, size_t out_stride,
                           cudaStream_t stream);

// The inverse: decodes in + t * in_stride + a * row_bytes into row slots[t]
// of array a.
cudaError_t LaunchDecodeKv(KvFormat format, const KvRowsLayout& layout, const uint8_t* in,
                           size_t in_stride, const int32_t* slots, int num_tokens, float* base,
                           cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_KV_CODEC_KERNELS_H_
