// CPU backend: plain loops for the element-wise ops, cpu/attention for
// attention, OpenBLAS for float32 GEMMs, kernels/q8_matmul and
// kernels/bf16_matmul for compact weights. Every op finishes before it
// returns.
#include <cblas.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "kernels/backend.h"
#include "kernels/bf16_matmul.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/kv_codec.h"
#include "kernels/q4_matmul.h"
#include "kernels/q8_matmul.h"
#include "kernels/token_picker.h"

namespace kvcast {
namespace {

class HostBuffer : public DeviceBuffer {
 public:
  HostBuffer(void* data, size_t size) : data_(data), size_(size) {}
  ~HostBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

std::optional<Q4Source> Q4SourceOf(WeightType type) {
  switch (type) {
    case WeightType::kQ4_0Blocks: return Q4Source::kQ4_0;
    case WeightType::kQ4_1Blocks: return Q4Source::kQ4_1;
    case WeightType::kQ4_KBlocks: return Q4Source::kQ4_K;
    case WeightType::kQ5_KBlocks: return Q4Source::kQ5_K;
    case WeightType::kQ5_0Blocks: return Q4Source::kQ5_0;
    case WeightType::kQ5_1Blocks: return Q4Source::kQ5_1;
    case WeightType::kQ6_KBlocks: return Q4Source::kQ6_K;
    default: return std::nullopt;
  }
}

class CpuBackend : public Backend {
 public:
  std::string_view name() const override {
    switch (weights_) {
      case CpuWeights::kQ8: return "cpu";
      case CpuWeights::kBF16: return "cpu-bf16";
      case CpuWeights::kF32: break;
    }
    return "cpu-f32";
  }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override {
    constexpr size_t kAlign = 64;
    size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          "cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    return std::unique_ptr<DeviceBuffer>(new HostBuffer(p, bytes));
  }
  size_t AvailableMemory() const override {
    struct sysinfo info;
    if (sysinfo(&info) != 0) return 0;
    return size_t(info.freeram + info.bufferram) * info.mem_unit;
  }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateStaging(size_t bytes) override {
    return Allocate(bytes);
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  explicit CpuBackend(CpuWeights weights) : weights_(weights) {}

  // The default backend ("cpu") keeps a GGUF file's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K /
  // Q5_K / Q6_K matrices as they are (Q4 panels), unless KVCAST_CPU_Q4=0 has them
  // widened and narrowed to Q8 like other weights (for A/B measurements), and its Q8_0
  // matrices as Q8 panels holding the same values.
  bool TakesWeightType(WeightType type) const override {
    if (type == WeightType::kQ8_0Blocks) return weights_ == CpuWeights::kQ8;
    if (Q4SourceOf(type).has_value()) {
      static const bool q4 = [] {
        const char* v = std::getenv("KVCAST_CPU_Q4");
        return v == nullptr || std::string_view(v) != "0";
      }();
      return weights_ == CpuWeights::kQ8 && q4;
    }
    return Backend::TakesWeightType(type);
  }

  // Q4 and Q8_0 blocks are packed as they are; vectors are widened to float32;
  // matrices too, then narrowed to the backend's compact format (Q8 or
  // BF16) when it has one and the rows allow.
  absl::StatusOr<Weight> LoadWeight(WeightType type, WeightKind kind, const void* src,
                                    size_t rows, size_t cols) override {
    if (const std::optional<Q4Source> source = Q4SourceOf(type)) {
      if (!TakesWeightType(type) || kind != WeightKind::kMatrix || !Q4Supported(*source, cols)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cpu backend: cannot keep a ", rows, " x ", cols, " Q4 ",
            kind == WeightKind::kMatrix ? "matrix" : "vector", " on ", std::string(name())));
      }
      auto q4 = Allocate(Q4MatrixBytes(*source, rows, cols));
      if (!q4.ok()) return q4.status();
      PackQ4Matrix(*source, src, rows, cols, (*q4)->data());
      return Weight(*std::move(q4), WeightType::kQ4, rows, cols);
    }
    if (type == WeightType::kQ8_0Blocks) {
      if (!TakesWeightType(type) || kind != WeightKind::kMatrix || !Q8Supported(cols)) {
        return absl::InvalidArgumentError(absl::StrCat("cpu backend: cannot keep a ", rows, " x ",
                                                       cols, " Q8_0 weight on ",
                                                       std::string(name())));
      }
      auto q8 = Allocate(Q8MatrixBytes(rows, cols));
      if (!q8.ok()) return q8.status();
      PackQ8_0Matrix(src, rows, cols, (*q8)->data());
      return Weight(*std::move(q8), WeightType::kQ8, rows, cols);
    }
    const size_t count = rows * cols;
    auto buf = Allocate(count * sizeof(float));
    if (!buf.ok()) return buf.status();
    float* out = (*buf)->f32();
    const auto* half = static_cast<const uint16_t*>(src);
    switch (type) {
      case WeightType::kF32:
        std::memcpy(out, src, count * sizeof(float));
        break;
      case WeightType::kF16:
        for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(half[i]);
        break;
      case WeightType::kBF16:
        for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(half[i]);
        break;
      case WeightType::kQ4_0Blocks:
      case WeightType::kQ4_1Blocks:
      case WeightType::kQ4_KBlocks:
      case WeightType::kQ5_KBlocks:
      case WeightType::kQ5_0Blocks:
      case WeightType::kQ5_1Blocks:
      case WeightType::kQ6_KBlocks:
      case WeightType::kQ8_0Blocks:
        break;  // Packed above.
      case WeightType::kQ8:
      case WeightType::kQ4:
        return absl::InvalidArgumentError("cpu backend: Q8 and Q4 are not checkpoint types");
    }
    if (weights_ == CpuWeights::kBF16 && kind == WeightKind::kMatrix && Bf16Supported(cols)) {
      auto bf16 = Allocate(count * sizeof(uint16_t));
      if (!bf16.ok()) return bf16.status();
      auto* dst = static_cast<uint16_t*>((*bf16)->data());
      for (size_t i = 0; i < count; ++i) dst[i] = FloatToBFloat16(out[i]);
      return Weight(*std::move(bf16), WeightType::kBF16, rows, cols);
    }
    if (weights_ == CpuWeights::kQ8 && kind == WeightKind::kMatrix && Q8Supported(cols)) {
      auto q8 = Allocate(Q8MatrixBytes(rows, cols));
      if (!q8.ok()) return q8.status();
      QuantizeQ8Matrix(out, rows, cols, (*q8)->data());
      return Weight(*std::move(q8), WeightType::kQ8, rows, cols);
    }
    return Weight(*std::move(buf), WeightType::kF32, rows, cols);
  }

  void Embedding(const int32_t* ids, int num_tokens, const Weight& table,
                 int dim, float* out) override {
    if (table.type() == WeightType::kQ8) {
      DequantizeQ8Rows(table.data(), table.rows(), dim, ids, num_tokens, out);
      return;
    }
    if (table.type() == WeightType::kQ4) {
      DequantizeQ4Rows(table.data(), table.rows(), dim, ids, num_tokens, out);
      return;
    }
    if (table.type() == WeightType::kBF16) {
      const auto* bf16 = static_cast<const uint16_t*>(table.data());
      for (int t = 0; t < num_tokens; ++t) {
        for (int i = 0; i < dim; ++i) {
          out[size_t(t) * dim + i] = BFloat16ToFloat(bf16[size_t(ids[t]) * dim + i]);
        }
      }
      return;
    }
    GatherRows(table.f32(), ids, num_tokens, dim, out);
  }
  void GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                  float* out) override {
    for (int t = 0; t < num_rows; ++t) {
      std::memcpy(out + size_t(t) * dim, x + size_t(rows[t]) * dim, dim * sizeof(float));
    }
  }

  void RmsNorm(const float* x, const float* weight, int rows, int dim,
               float eps, float* out) override {
#pragma omp parallel for schedule(static) if (Omp() && int64_t(rows) * dim >= (1 << 15))
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + size_t(r) * dim;
      float* yr = out + size_t(r) * dim;
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
      float inv = 1.f / std::sqrt(float(ss / dim) + eps);
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
    }
  }

  void AddRmsNorm(float* x, const float* y, const float* weight, int rows, int dim,
                  float eps, float* out) override {
    const int64_t n = int64_t(rows) * dim;
#pragma omp parallel for schedule(static) if (Omp() && n >= (1 << 15))
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    RmsNorm(x, weight, rows, dim, eps, out);
  }

  void Linear(const float* x, int m, int k, const Weight& weight, int n,
              const float* bias, float* y) override {
    const float* w = weight.f32();
    if (weight.type() == WeightType::kQ8) {
      Q8Linear(x, m, k, weight.data(), n, y);
    } else if (weight.type() == WeightType::kQ4) {
      Q4Linear(x, m, k, weight.data(), n, y);
    } else if (weight.type() == WeightType::kBF16) {
      Bf16Linear(x, m, k, static_cast<const uint16_t*>(weight.data()), n, y);
    } else if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.f, w, k, x, 1, 0.f, y, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x, k,
                  w, k, 0.f, y, n);
    }
    if (bias != nullptr) {
      for (int r = 0; r < m; ++r) {
        float* yr = y + size_t(r) * n;
        for (int j = 0; j < n; ++j) yr[j] += bias[j];
      }
    }
  }

  void Rope(float* x, int num_tokens, int x_stride, int num_heads,
            int head_dim, const int32_t* positions,
            const float* inv_freq) override {
    const int half = head_dim / 2;
    std::vector<float> cos_t(half), sin_t(half);
    for (int t = 0; t < num_tokens; ++t) {
      for (int i = 0; i < half; ++i) {
        // Angles in float, as HF computes them, so long positions round alike.
        float angle = float(positions[t]) * inv_freq[i];
        cos_t[i] = std::cos(angle);
        sin_t[i] = std::sin(angle);
      }
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + size_t(t) * x_stride + size_t(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          float a = v[i], b = v[i + half];
          v[i] = a * cos_t[i] - b * sin_t[i];
          v[i + half] = b * cos_t[i] + a * sin_t[i];
        }
      }
    }
  }

  void SwiGlu(const float* gate_up, int rows, int dim, float* out) override {
    CpuSwiGlu(gate_up, rows, dim, out, Omp());
  }

  void WriteKv(const float* k, const float* v, int num_tokens, int stride,
               const int32_t* slots, int num_kv_heads, int head_dim, KvStorage storage,
               void* k_cache, void* v_cache) override {
    const size_t row = size_t(num_kv_heads) * head_dim;
    const size_t row_bytes = row * KvValueBytes(storage);
    thread_local std::vector<uint8_t> half;
    half.resize(row * 2);
    for (int t = 0; t < num_tokens; ++t) {
      for (auto [src, cache] : {std::pair{k, k_cache}, std::pair{v, v_cache}}) {
        const float* from = src + size_t(t) * stride;
        auto* to = static_cast<uint8_t*>(cache) + size_t(slots[t]) * row_bytes;
        switch (storage) {
          case KvStorage::kF32:
            std::memcpy(to, from, row_bytes);
            break;
          case KvStorage::kF16:
            EncodeKvRow(KvFormat::kFp16, from, num_kv_heads, head_dim, head_dim, to);
            break;
          case KvStorage::kF32Fp16Values:
            EncodeKvRow(KvFormat::kFp16, from, num_kv_heads, head_dim, head_dim, half.data());
            DecodeKvRow(KvFormat::kFp16, half.data(), num_kv_heads, head_dim, head_dim,
                        reinterpret_cast<float*>(to));
            break;
        }
      }
    }
  }
  bool SupportsHalfKvPages() const override { return true; }
  bool SamplesWithTokenMasks() const override { return true; }
  bool KvPagesInHostMemory() const override { return true; }

  // Rows of fp16 pages go to the wire as they are for the fp16 format, and
  // through float32 for the others.
  absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src, const int32_t* slots,
                        int num_tokens, uint8_t* out, size_t out_stride) override {
    const size_t row = size_t(src.num_heads) * src.head_dim;
    const size_t value_bytes = KvValueBytes(src.storage);
    const size_t row_bytes = KvRowBytes(format, src.num_heads, src.head_dim, block);
    thread_local std::vector<float> widened;
    widened.resize(row);
    for (int t = 0; t < num_tokens; ++t) {
      for (int a = 0; a < src.num_arrays; ++a) {
        const auto* from = static_cast<const uint8_t*>(src.base) +
                           (a * src.array_values + size_t(slots[t]) * row) * value_bytes;
        uint8_t* to = out + t * out_stride + a * row_bytes;
        if (src.storage != KvStorage::kF16) {
          EncodeKvRow(format, reinterpret_cast<const float*>(from), src.num_heads, src.head_dim,
                      block, to);
        } else if (format == KvFormat::kFp16) {
          std::memcpy(to, from, row_bytes);
        } else {
          DecodeKvRow(KvFormat::kFp16, from, src.num_heads, src.head_dim, src.head_dim,
                      widened.data());
          EncodeKvRow(format, widened.data(), src.num_heads, src.head_dim, block, to);
        }
      }
    }
    return absl::OkStatus();
  }

  // Into fp16 pages, a format other than fp16 is rounded to fp16 on the
  // way (through float32).
  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override {
    const size_t row = size_t(dst.num_heads) * dst.head_dim;
    const size_t value_bytes = KvValueBytes(dst.storage);
    const size_t row_bytes = KvRowBytes(format, dst.num_heads, dst.head_dim, block);
    thread_local std::vector<float> widened;
    widened.resize(row);
    for (int t = 0; t < num_tokens; ++t) {
      for (int a = 0; a < dst.num_arrays; ++a) {
        const uint8_t* from = in + t * in_stride + a * row_bytes;
        auto* to = static_cast<uint8_t*>(dst.base) +
                   (a * dst.array_values + size_t(slots[t]) * row) * value_bytes;
        if (dst.storage != KvStorage::kF16) {
          DecodeKvRow(format, from, dst.num_heads, dst.head_dim, block,
                      reinterpret_cast<float*>(to));
        } else if (format == KvFormat::kFp16) {
          std::memcpy(to, from, row_bytes);
        } else {
          DecodeKvRow(format, from, dst.num_heads, dst.head_dim, block, widened.data());
          EncodeKvRow(KvFormat::kFp16, widened.data(), dst.num_heads, dst.head_dim,
                      dst.head_dim, to);
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status SampleTokens(const float* logits, int vocab, const TokenSampling* params, int num,
                            int32_t* tokens) override {
    for (int j = 0; j < num; ++j) {
      tokens[j] = picker_.Pick(absl::MakeConstSpan(logits + size_t(params[j].row) * vocab, vocab),
                               params[j]);
    }
    return absl::OkStatus();
  }

  absl::Status SupportsAttention(int num_heads, int num_kv_heads, int head_dim) const override {
    if (num_heads > 0 && num_kv_heads > 0 && head_dim > 0 && num_heads % num_kv_heads == 0) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: attention needs head_dim > 0 and query heads (", num_heads,
                     ") a multiple of KV heads (", num_kv_heads, "); got head_dim ", head_dim));
  }

  // kernels/cpu/attention.h, reading K/V in place from the pages.
  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs,
                      int num_seqs, const AttentionShape& s,
                      const void* k_cache, const void* v_cache,
                      float* out) override {
    CpuPagedAttention(q, q_stride, seqs, num_seqs, s, k_cache, v_cache, out, Omp(),
                      CpuAttentionKernelFromEnv());
  }

 private:
  // Float32 weights run their GEMMs on OpenBLAS's threads, and OpenMP stays
  // off in every op: after a parallel region OpenMP's threads spin waiting
  // for the next, and on a small machine they and OpenBLAS's took the
  // cores from each other (2.4x slower on 2 cores; docs/benchmarks.md).
  bool Omp() const { return weights_ != CpuWeights::kF32; }

  TokenPicker picker_;  // SampleTokens scratch
  const CpuWeights weights_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(CpuWeights weights) {
  return std::make_unique<CpuBackend>(weights);
}

static const bool kCpuRegistered = RegisterBackend(
    "cpu", [](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
      return NewCpuBackend(CpuWeights::kQ8);
    });
static const bool kCpuBf16Registered = RegisterBackend(
    "cpu-bf16", [](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
      return NewCpuBackend(CpuWeights::kBF16);
    });
static const bool kCpuF32Registered = RegisterBackend(
    "cpu-f32", [](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
      return NewCpuBackend(CpuWeights::kF32);
    });

}  // namespace kvcast
