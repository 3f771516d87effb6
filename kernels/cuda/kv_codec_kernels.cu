#include "kernels/cuda/kv_codec_kernels.h"

#include <climits>

#include "kernels/cuda/kv_codec_math.h"

namespace kvcast {
namespace cuda {
namespace {

using kv_math::AbsBits;
using kv_math::DecodeHalf;

constexpr int kMaxThreads = 256;
// Scales a decode block stages in shared memory at a time (8 KiB).
constexpr int kChunkScales = 2048;

// 16-bit little-endian access to rows of arbitrary alignment: one uint16
// access where the address allows (uniform per row), two bytes otherwise.
__device__ __forceinline__ void Store16(uint8_t* p, uint16_t v, bool aligned) {
  if (aligned) {
    *reinterpret_cast<uint16_t*>(p) = v;  // the GPU is little-endian
  } else {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
  }
}

__device__ __forceinline__ uint16_t Load16(const uint8_t* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

__device__ __forceinline__ bool Aligned2(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 1) == 0;
}

// The (token, array) row of this thread block (grid.x = token * num_arrays +
// array): offsets of its float row and of its encoded row, and whether its
// slot is negative (the row is skipped; the offsets are then meaningless).
struct RowPtrs {
  size_t float_offset;  // from base
  size_t byte_offset;   // from the encoded rows
  bool skip;
};

__device__ __forceinline__ RowPtrs RowOf(const KvRowsLayout& layout, const int32_t* slots,
                                         size_t stride, size_t n) {
  const int t = static_cast<int>(blockIdx.x) / layout.num_arrays;
  const int a = static_cast<int>(blockIdx.x) - t * layout.num_arrays;
  const int32_t slot = slots[t];
  RowPtrs r;
  r.skip = slot < 0;
  r.float_offset = static_cast<size_t>(a) * layout.array_floats + static_cast<size_t>(slot) * n;
  r.byte_offset = static_cast<size_t>(t) * stride + static_cast<size_t>(a) * layout.row_bytes;
  return r;
}

// fp16 / bf16: one value per thread, no scales.
template <KvFormat kFormat>
__global__ void EncodeUnscaledKernel(KvRowsLayout layout, const float* __restrict__ base,
                                     const int32_t* __restrict__ slots, uint8_t* out,
                                     size_t out_stride) {
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  const RowPtrs row = RowOf(layout, slots, out_stride, n);
  if (row.skip) return;
  const float* x = base + row.float_offset;
  uint8_t* o = out + row.byte_offset;
  const bool aligned = Aligned2(o);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    Store16(o + 2 * i, kv_math::EncodeUnscaled(kFormat, x[i]), aligned);
  }
}

template <KvFormat kFormat>
__global__ void DecodeUnscaledKernel(KvRowsLayout layout, const uint8_t* in, size_t in_stride,
                                     const int32_t* __restrict__ slots, float* __restrict__ base) {
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  const RowPtrs row = RowOf(layout, slots, in_stride, n);
  if (row.skip) return;
  const uint8_t* c = in + row.byte_offset;
  float* y = base + row.float_offset;
  const bool aligned = Aligned2(c);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    y[i] = kv_math::DecodeUnscaled(kFormat, Load16(c + 2 * i, aligned));
  }
}

// Scaled formats. The row's scale blocks are taken kUnit at a time by groups
// of `group` lanes (a power of two <= min(block, 32), aligned within a warp):
// the group reduces each block's max |x| bits with shuffles, every lane
// derives the scale from it, then the group writes the unit's value bytes.
// kUnit is 2 for 4-bit formats with an odd block, where a byte may hold
// values of two blocks; two odd blocks fill whole bytes (head_dim is even, so
// a row has an even number of them).
template <KvFormat kFormat, int kUnit>
__global__ void EncodeScaledKernel(KvRowsLayout layout, const float* __restrict__ base,
                                   const int32_t* __restrict__ slots, uint8_t* out,
                                   size_t out_stride, int group) {
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  const RowPtrs row = RowOf(layout, slots, out_stride, n);
  if (row.skip) return;
  const float* x = base + row.float_offset;
  uint8_t* o = out + row.byte_offset;
  const int block = layout.block;
  const size_t num_blocks = n / block;
  uint8_t* values = o + 2 * num_blocks;
  const float qmax = kv_math::FormatQmax(kFormat);

  const int lane = threadIdx.x & (group - 1);
  const int warp_lane = threadIdx.x & 31;
  const unsigned mask =
      group == 32 ? 0xffffffffu : ((1u << group) - 1u) << (warp_lane & ~(group - 1));
  const size_t groups = blockDim.x / group;
  const size_t num_units = num_blocks / kUnit;
  const size_t unit_bytes = kv_math::ValueBytes(kFormat, static_cast<size_t>(kUnit) * block);

  for (size_t u = threadIdx.x / group; u < num_units; u += groups) {
    const size_t b0 = u * kUnit;
    float scale[kUnit];
#pragma unroll
    for (int k = 0; k < kUnit; ++k) {
      const float* xb = x + (b0 + k) * block;
      uint32_t m = 0;
      for (int i = lane; i < block; i += group) {
        const uint32_t v = AbsBits(xb[i]);
        m = v > m ? v : m;
      }
      for (int off = group >> 1; off > 0; off >>= 1) {
        const uint32_t v = __shfl_xor_sync(mask, m, off);
        m = v > m ? v : m;
      }
      const uint16_t h = kv_math::ScaleForBlock(m, qmax);
      if (lane == 0) {
        o[2 * (b0 + k)] = static_cast<uint8_t>(h);
        o[2 * (b0 + k) + 1] = static_cast<uint8_t>(h >> 8);
      }
      scale[k] = DecodeHalf(h);
    }
    const auto scale_of = [&](size_t b) { return b == b0 ? scale[0] : scale[kUnit - 1]; };
    const size_t j0 = kv_math::ValueBytes(kFormat, b0 * block);
    for (size_t j = lane; j < unit_bytes; j += group) {
      values[j0 + j] = kv_math::EncodeValueByte(kFormat, x, j0 + j, block, scale_of);
    }
  }
}

// One value per thread; the scales are decoded into shared memory
// kChunkScales at a time, so any row length works.
template <KvFormat kFormat>
__global__ void DecodeScaledKernel(KvRowsLayout layout, const uint8_t* in, size_t in_stride,
                                   const int32_t* __restrict__ slots, float* __restrict__ base) {
  __shared__ float scales[kChunkScales];
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  const RowPtrs row = RowOf(layout, slots, in_stride, n);
  if (row.skip) return;  // uniform over the block: no __syncthreads is skipped by some
  const uint8_t* c = in + row.byte_offset;
  float* y = base + row.float_offset;
  const int block = layout.block;
  const size_t num_blocks = n / block;
  const uint8_t* values = c + 2 * num_blocks;
  const bool aligned = Aligned2(c);

  for (size_t c0 = 0; c0 < num_blocks; c0 += kChunkScales) {
    const size_t cn = num_blocks - c0 < kChunkScales ? num_blocks - c0 : kChunkScales;
    for (size_t b = threadIdx.x; b < cn; b += blockDim.x) {
      scales[b] = DecodeHalf(Load16(c + 2 * (c0 + b), aligned));
    }
    __syncthreads();
    const auto scale_of = [&](size_t b) { return scales[b - c0]; };
    const size_t v1 = (c0 + cn) * block;
    for (size_t i = c0 * block + threadIdx.x; i < v1; i += blockDim.x) {
      y[i] = kv_math::DecodeValue(kFormat, values, i, block, scale_of);
    }
    __syncthreads();
  }
}

int ThreadsFor(size_t work) {
  const size_t rounded = (work + 31) / 32 * 32;
  return rounded >= kMaxThreads ? kMaxThreads : static_cast<int>(rounded == 0 ? 32 : rounded);
}

// cudaSuccess if the layout is one the format allows and the grid fits.
cudaError_t CheckLayout(KvFormat format, const KvRowsLayout& layout, int num_tokens) {
  if (static_cast<int>(format) > static_cast<int>(KvFormat::kInt4)) return cudaErrorInvalidValue;
  if (num_tokens < 0 || layout.num_arrays <= 0 || layout.num_heads <= 0 || layout.head_dim <= 0) {
    return cudaErrorInvalidValue;
  }
  if (static_cast<int64_t>(num_tokens) * layout.num_arrays > INT_MAX) return cudaErrorInvalidValue;
  if (kv_math::FormatScaled(format)) {
    if (layout.block <= 0 || layout.head_dim % layout.block != 0) return cudaErrorInvalidValue;
    if (kv_math::FormatBits(format) == 4 && layout.head_dim % 2 != 0) return cudaErrorInvalidValue;
  }
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  if (layout.row_bytes < kv_math::RowBytes(format, n, layout.block)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

template <KvFormat kFormat>
void LaunchEncodeScaled(const KvRowsLayout& layout, const float* base, const int32_t* slots,
                        int rows, uint8_t* out, size_t out_stride, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(layout.num_heads) * layout.head_dim;
  const size_t num_blocks = n / layout.block;
  int group = 1;
  while (group * 2 <= layout.block && group * 2 <= 32) group *= 2;
  const bool odd_nibbles = kv_math::FormatBits(kFormat) == 4 && layout.block % 2 != 0;
  const int threads = ThreadsFor((odd_nibbles ? num_blocks / 2 : num_blocks) * group);
  if (odd_nibbles) {
    EncodeScaledKernel<kFormat, 2>
        <<<rows, threads, 0, stream>>>(layout, base, slots, out, out_stride, group);
  } else {
    EncodeScaledKernel<kFormat, 1>
        <<<rows, threads, 0, stream>>>(layout, base, slots, out, out_stride, group);
  }
}

}  // namespace

cudaError_t LaunchEncodeKv(KvFormat format, const KvRowsLayout& layout, const float* base,
                           const int32_t* slots, int num_tokens, uint8_t* out, size_t out_stride,
                           cudaStream_t stream) {
  if (const cudaError_t e = CheckLayout(format, layout, num_tokens); e != cudaSuccess) return e;
  if (num_tokens == 0) return cudaSuccess;
  const int rows = num_tokens * layout.num_arrays;
  const int threads = ThreadsFor(static_cast<size_t>(layout.num_heads) * layout.head_dim);
  switch (format) {
    case KvFormat::kFp16:
      EncodeUnscaledKernel<KvFormat::kFp16>
          <<<rows, threads, 0, stream>>>(layout, base, slots, out, out_stride);
      break;
    case KvFormat::kBf16:
      EncodeUnscaledKernel<KvFormat::kBf16>
          <<<rows, threads, 0, stream>>>(layout, base, slots, out, out_stride);
      break;
    case KvFormat::kFp8E4M3:
      LaunchEncodeScaled<KvFormat::kFp8E4M3>(layout, base, slots, rows, out, out_stride, stream);
      break;
    case KvFormat::kInt8:
      LaunchEncodeScaled<KvFormat::kInt8>(layout, base, slots, rows, out, out_stride, stream);
      break;
    case KvFormat::kFp4E2M1:
      LaunchEncodeScaled<KvFormat::kFp4E2M1>(layout, base, slots, rows, out, out_stride, stream);
      break;
    case KvFormat::kInt4:
      LaunchEncodeScaled<KvFormat::kInt4>(layout, base, slots, rows, out, out_stride, stream);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchDecodeKv(KvFormat format, const KvRowsLayout& layout, const uint8_t* in,
                           size_t in_stride, const int32_t* slots, int num_tokens, float* base,
                           cudaStream_t stream) {
  if (const cudaError_t e = CheckLayout(format, layout, num_tokens); e != cudaSuccess) return e;
  if (num_tokens == 0) return cudaSuccess;
  const int rows = num_tokens * layout.num_arrays;
  const int threads = ThreadsFor(static_cast<size_t>(layout.num_heads) * layout.head_dim);
  switch (format) {
    case KvFormat::kFp16:
      DecodeUnscaledKernel<KvFormat::kFp16>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
    case KvFormat::kBf16:
      DecodeUnscaledKernel<KvFormat::kBf16>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
    case KvFormat::kFp8E4M3:
      DecodeScaledKernel<KvFormat::kFp8E4M3>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
    case KvFormat::kInt8:
      DecodeScaledKernel<KvFormat::kInt8>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
    case KvFormat::kFp4E2M1:
      DecodeScaledKernel<KvFormat::kFp4E2M1>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
    case KvFormat::kInt4:
      DecodeScaledKernel<KvFormat::kInt4>
          <<<rows, threads, 0, stream>>>(layout, in, in_stride, slots, base);
      break;
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvcast
