// The AMX version of the Q8 dot kernel (q8_kernels.h), for groups of 16
// activation rows. A tile multiply (TDPBSUD: signed activations, unsigned
// weight bytes) gives the exact integer dot products of one block for 16
// rows by one 16-row panel, whose bytes are stored in exactly the layout
// the tile unit reads (four bytes of k for each of the 16 rows, k-quad by
// k-quad); AVX-512 then scales each block and adds it into float
// accumulators in the order of the scalar reference, so the result is bit
// for bit the other kernels'.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace q8_internal {
namespace {

#define KVCAST_TARGET_AMX \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx2,fma")))

// Tiles: C (16 x 16 int32) 0..3, A (16 rows x 32 bytes) 4..5, B (8 quads x
// 64 bytes) 6..7.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 8, 8};
};

// MG groups of 16 rows (from r0) by PG panels, all blocks.
template <int MG, int PG>
KVCAST_TARGET_AMX void AmxTile(const Q8Rows& x, int r0, const uint8_t* w, const float* ws,
                               int64_t cols, float* out, int64_t out_stride) {
  const int64_t blocks = x.blocks, k = blocks * 32;
  const int64_t panel_bytes = blocks * kPanelBlockBytes, panel_scales = blocks * kPanelRows;
  alignas(64) float acc[MG][PG][16][16];
  alignas(64) int32_t dots[MG][PG][16][16];
  std::memset(acc, 0, sizeof(acc));
  for (int64_t b = 0; b < blocks; ++b) {
    _tile_zero(0);
    if (PG > 1) _tile_zero(1);
    if (MG > 1) _tile_zero(2);
    if (MG > 1 && PG > 1) _tile_zero(3);
    _tile_loadd(4, x.q + r0 * k + b * 32, k);
    if (MG > 1) _tile_loadd(5, x.q + (r0 + 16) * k + b * 32, k);
    _tile_loadd(6, w + b * kPanelBlockBytes, 64);
    if (PG > 1) _tile_loadd(7, w + panel_bytes + b * kPanelBlockBytes, 64);
    _tile_dpbsud(0, 4, 6);
    if (PG > 1) _tile_dpbsud(1, 4, 7);
    if (MG > 1) _tile_dpbsud(2, 5, 6);
    if (MG > 1 && PG > 1) _tile_dpbsud(3, 5, 7);
    _tile_stored(0, dots[0][0], 64);
    if (PG > 1) _tile_stored(1, dots[0][PG - 1], 64);
    if (MG > 1) _tile_stored(2, dots[MG - 1][0], 64);
    if (MG > 1 && PG > 1) _tile_stored(3, dots[MG - 1][PG - 1], 64);
    for (int g = 0; g < MG; ++g) {
      for (int p = 0; p < PG; ++p) {
        const __m512 wsv = _mm512_loadu_ps(ws + p * panel_scales + b * kPanelRows);
        for (int i = 0; i < 16; ++i) {
          const int64_t xb = (r0 + 16 * g + i) * blocks + b;
          const __m512 s = _mm512_mul_ps(_mm512_set1_ps(x.s[xb]), wsv);
          const __m512i v = _mm512_sub_epi32(_mm512_load_si512(dots[g][p][i]),
                                             _mm512_set1_epi32(x.c[xb]));
          _mm512_store_ps(acc[g][p][i],
                          _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(v), _mm512_load_ps(acc[g][p][i])));
        }
      }
    }
  }
  for (int g = 0; g < MG; ++g) {
    for (int p = 0; p < PG; ++p) {
      const int64_t valid = cols - 16 * p;
      if (valid <= 0) break;
      const __mmask16 mask = valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
      for (int i = 0; i < 16; ++i) {
        _mm512_mask_storeu_ps(out + (r0 + 16 * g + i) * out_stride + 16 * p, mask,
                              _mm512_load_ps(acc[g][p][i]));
      }
    }
  }
}

KVCAST_TARGET_AMX void DotAmx(const Q8Rows& x, int rows, const uint8_t* w, const float* ws,
                              int64_t panels, int64_t cols, float* out, int64_t out_stride) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  const int64_t panel_bytes = x.blocks * kPanelBlockBytes, panel_scales = x.blocks * kPanelRows;
  for (int64_t p = 0; p < panels; p += 2) {
    const uint8_t* wp = w + p * panel_bytes;
    const float* wsp = ws + p * panel_scales;
    float* op = out + 16 * p;
    const int64_t c = cols - 16 * p;
    const bool pair = p + 2 <= panels;
    for (int r = 0; r < rows; r += 32) {
      if (r + 32 <= rows) {
        pair ? AmxTile<2, 2>(x, r, wp, wsp, c, op, out_stride)
             : AmxTile<2, 1>(x, r, wp, wsp, c, op, out_stride);
      } else {
        pair ? AmxTile<1, 2>(x, r, wp, wsp, c, op, out_stride)
             : AmxTile<1, 1>(x, r, wp, wsp, c, op, out_stride);
      }
    }
  }
  _tile_release();
}

// The CPU has AMX-TILE and AMX-INT8, and Linux lets this process use the
// tile data state (it must be asked for once, ARCH_REQ_XCOMP_PERM).
bool AmxUsable() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

const Q8Kernels* AmxQ8Kernels() {
  static const Q8Kernels kernels{"amx", &DotAmx, nullptr, 16};
  static const bool usable = [] {
    return CpuHas(CpuIsa::kAmx) && Avx512VnniQ8Kernels() != nullptr && AmxUsable();
  }();
  return usable ? &kernels : nullptr;
}

}  // namespace q8_internal
}  // namespace kvcast
