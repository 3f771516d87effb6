// Q4 weights on the CPU: a [n, k] matrix of 4-, 5- or 6-bit values in
// blocks of 32 along k, each block of each row with a scale d and offset m
// (x = d * q + m, q in 0..15 or 0..31; 6-bit: x = (d * sc) * (q - 32) with
// an int8 sc per 16 values), read from a GGUF file's Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K or Q6_K blocks without loss, and the matrix product
// against it. A decode step reads 0.625 bytes per weight (0.75 from Q4_K or
// Q5_0 / Q5_1, 0.875 from Q5_K and Q6_K) instead of Q8's 1.125.
//
// Layout of a Q4 matrix (Q4MatrixBytes(source, n, k) bytes, 64-byte aligned
// by the caller): a 64-byte header (byte 0: the panel format, 0 = 4-bit
// with fp16 d and m, 1 = 4-bit with float32, 2 = 5-bit with float32, 3 =
// 5-bit with fp16, 4 = 6-bit), then rows grouped in panels of 16 (the last
// padded with zero rows), P = ceil(n / 16) panels, B = k / 32 blocks, panel
// p's block b at 64 + (p * B + b) * S (S = 320, 384, 448, 384, 448): 256
// bytes of nibbles, byte c * 64 + 4 * i + t (c < 4, i < 16, t < 4) holding
// the low four bits of q[16p + i, 32b + 4c + t] in its low nibble and of
// q[16p + i, 32b + 16 + 4c + t] in its high one (the four-bytes-per-row
// order Q8 panels use, so a vector lane is a row); for 5- and 6-bit values
// 64 bytes of fifth bits, byte 4 * i + t holding those of the same two
// values at bits 2c and 2c + 1; for 6-bit values 64 bytes of sixth bits in
// the same order; then d of rows 0..15, then m of rows 0..15 (6-bit: d as
// fp16, then the int8 sc of each row's values 0..15, then of 16..31).
//
// From GGUF: a Q4_1 block (d, m, 16 bytes; value j < 16 the low nibble of
// byte j, value j + 16 its high nibble) keeps its fp16 d, m and nibbles; a
// Q4_0 block (x = d * (q - 8)) becomes m = -8 * d, exact in fp16; a Q4_K or
// Q5_K super-block (fp16 d and dmin, 8 sub-blocks of 32 with 6-bit scale s
// and min t, x = (d * s) * q - dmin * t; Q5_K's fifth bits in qh) gives each
// sub-block float32 d * s and -(dmin * t), both exact; Q5_0 / Q5_1 blocks
// are Q4_0 / Q4_1 blocks with a fifth bit per value (Q5_0: m = -16 * d); a
// Q6_K super-block (fp16 d, 16 int8 scales, one per 16 values) gives each
// block its super-block's d and its two scales. So DequantizeQ4Rows gives
// the values ggml's own dequantization gives (equal as numbers: where
// ggml's d * (q - 8) is -0 this is +0).
//
// Q4Linear computes y = x W^T with the arithmetic of llama.cpp's Q4_1 x
// Q8_1 dot (its rounding differs in the last bits): each 32-value block of
// an activation row is quantized as Q8Linear quantizes it (scale s, int8 q,
// their sum), the integer dot of the nibbles with q is exact, and each
// block is added in order as
//   acc = fma(d * s, float(integer dot), acc);
//   acc = fma(m, s * float(sum of q), acc)
// starting from acc = 0; for 6-bit blocks, with t0 and t1 the sums of the
// block's first and last 16 q, each half h in order as
//   acc = fma((d * sc_h) * s, float(integer dot of half h - 32 * t_h), acc).
// For calls of 3 rows or more, 5- and 6-bit panels are widened to bytes a
// tile at a time first (the same values, so the same sums). The scalar,
// AVX2, AVX-VNNI and AVX-512 VNNI
// kernels (chosen at run time, capped by KVCAST_CPU_ISA) follow this exact
// sequence, so the result is bit-identical across them and across thread
// counts, and batch-invariant.
//
// Thread safety: stateless; Q4Linear runs on the calling thread plus an
// OpenMP team, and may be called from several threads at once.
#ifndef KVCAST_KERNELS_Q4_MATMUL_H_
#define KVCAST_KERNELS_Q4_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvcast {

constexpr int kQ4Block = 32;

// The GGUF block formats a Q4 matrix is packed from.
enum class Q4Source {
  kQ4_0,  // 18 bytes a 32 values: fp16 d, 16 bytes of nibbles; x = d * (q - 8)
  kQ4_1,  // 20 bytes a 32 values: fp16 d, fp16 m, 16 bytes of nibbles; x = d * q + m
  kQ4_K,  // 144 bytes a 256 values: fp16 d, dmin, 12 bytes of scales, 128 of nibbles
  kQ5_K,  // 176 bytes a 256 values: as Q4_K with 32 bytes of fifth bits before the nibbles
  kQ5_0,  // 22 bytes a 32 values: fp16 d, 4 bytes of fifth bits, 16 of nibbles; d * (q - 16)
  kQ5_1,  // 24 bytes a 32 values: fp16 d, fp16 m, 4 + 16 bytes as Q5_0; x = d * q + m
  kQ6_K,  // 210 bytes a 256 values: 128 bytes of nibbles, 64 of top bits, 16 int8 scales, fp16 d
};
// Values and bytes of one source block: 32 / 18, 32 / 20, 256 / 144, 256 / 176, 32 / 22,
// 32 / 24, 256 / 210.
int Q4SourceBlockValues(Q4Source source);
int Q4SourceBlockBytes(Q4Source source);

// Whether rows of k values fit the source's blocks.
inline bool Q4Supported(Q4Source source, int64_t k) {
  return k > 0 && k % Q4SourceBlockValues(source) == 0;
}
size_t Q4MatrixBytes(Q4Source source, int64_t n, int64_t k);

// Packs n rows of k values stored as `source` blocks at `blocks` (row-major:
// row r is consecutive blocks) into `out`.
void PackQ4Matrix(Q4Source source, const void* blocks, int64_t n, int64_t k, void* out);
// Widens rows `rows[i]` of the Q4 matrix `w` [n, k] into out[i, :].
void DequantizeQ4Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out);
// y[m, n] = x[m, k] W^T for the Q4 matrix `w` [n, k]; y rows are n apart.
void Q4Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y);

// "avx512-vnni", "avx-vnni", "avx2" or "scalar": the kernel Q4Linear uses
// on this CPU.
std::string_view Q4KernelName();

}  // namespace kvcast

#endif  // KVCAST_KERNELS_Q4_MATMUL_H_
