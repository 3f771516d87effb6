// The CUDA backend: the op layer over kernels/cuda's launchers and cuBLAS.
//
// Streams: compute ops run in order on one stream; the KV transfer ops
// (EncodeKv / DecodeKv, called from the transport's thread) run on a second
// stream and wait for themselves before returning, so landed pages are
// complete when DecodeKv returns and encoded bytes are in host memory when
// EncodeKv does.
//
// Weights: matrices stay in the checkpoint's fp16 or bf16 (float32
// checkpoints are rounded to bf16); vectors are float32. Linear casts its
// float32 input to the weight's type and runs cublasGemmEx with float32
// accumulation and float32 output (one row: the skinny kernel, below).
//
// Memory: scratch (GEMM inputs, attention partials, transfer staging) is
// kept and grown, never allocated per call once the shapes have been seen;
// the KV page pool is one allocation made by the engine at start-up.
//
// Errors: ops cannot return a Status; the first CUDA or cuBLAS error is kept
// and returned by Synchronize() (and by every later one: a faulted context
// cannot be trusted).
//
// KVCAST_CUDA_OP_TIMES=1 times every compute op on the GPU (op_times.h) and
// prints the totals by op and rows when the backend is destroyed.
// Linear on one row (decode at batch 1) runs skinny_gemm.h's kernel on the
// float32 row, more rows cast + cuBLAS; KVCAST_CUDA_GEMM=cublas or =skinny
// (up to 8 rows) switches for A/B measurements.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_codec_kernels.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/op_times.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/skinny_gemm.h"

namespace kvcast {
namespace {

class CudaBuffer : public DeviceBuffer {
 public:
  CudaBuffer(void* data, size_t size, bool pinned_host)
      : data_(data), size_(size), pinned_host_(pinned_host) {}
  ~CudaBuffer() override {
    if (pinned_host_) {
      cudaFreeHost(data_);
    } else {
      cudaFree(data_);
    }
  }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* const data_;
  const size_t size_;
  const bool pinned_host_;
};

// Device scratch that only grows.
class Scratch {
 public:
  ~Scratch() { cudaFree(data_); }
  // At least `bytes` of device memory, or null on failure (cudaMalloc's
  // error in *error).
  void* Get(size_t bytes, cudaError_t* error) {
    if (bytes > size_) {
      cudaFree(data_);
      data_ = nullptr;
      size_ = 0;
      const size_t want = std::max(bytes, size_ * 2);
      *error = cudaMalloc(&data_, want);
      if (*error != cudaSuccess) return data_ = nullptr;
      size_ = want;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

bool EnvIs(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

class CudaBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(int device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda backend: no CUDA device (", e == cudaSuccess ? "none found" : cudaGetErrorString(e),
          ")"));
    }
    if (device < 0 || device >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda backend: device ", device, " outside [0, ", count, ")"));
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cuda backend: ", cudaGetErrorString(e)));
    }
    if (prop.major < 9) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda backend: device ", device, " (", prop.name, ") is sm_", prop.major,
                       prop.minor, "; kernels are built for sm_90 and newer"));
    }
    std::unique_ptr<CudaBackend> b(new CudaBackend(device));
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&b->compute_, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&b->transfer_, cudaStreamNonBlocking)) != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cuda backend: ", cudaGetErrorString(e)));
    }
    if (cublasCreate(&b->cublas_) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(b->cublas_, b->compute_) != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cuda backend: cublasCreate failed");
    }
    return std::unique_ptr<Backend>(std::move(b));
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (compute_) cudaStreamSynchronize(compute_);
    if (transfer_) cudaStreamSynchronize(transfer_);
    if (op_times_.enabled()) {
      op_times_.Collect();
      std::fprintf(stderr, "cuda backend: GPU time by op (KVCAST_CUDA_OP_TIMES)\n%s",
                   op_times_.Report().c_str());
    }
    if (cublas_) cublasDestroy(cublas_);
    if (compute_) cudaStreamDestroy(compute_);
    if (transfer_) cudaStreamDestroy(transfer_);
    cudaFreeHost(pinned_slots_);
  }

  std::string_view name() const override { return "cuda"; }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override {
    Bind();
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      cudaGetLastError();  // allocation failures are not sticky; clear it
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: cannot allocate ", bytes, " bytes: ", cudaGetErrorString(e)));
    }
    return std::unique_ptr<DeviceBuffer>(new CudaBuffer(p, bytes, /*pinned_host=*/false));
  }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateStaging(size_t bytes) override {
    Bind();
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
        e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: cannot pin ", bytes, " bytes of host memory: ", cudaGetErrorString(e)));
    }
    return std::unique_ptr<DeviceBuffer>(new CudaBuffer(p, bytes, /*pinned_host=*/true));
  }

  size_t AvailableMemory() const override {
    cudaSetDevice(device_);
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    return free_bytes;
  }

  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    Bind();
    // From pageable memory the copy is staged before this returns, so the
    // caller may reuse `src` at once.
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_), "CopyToDevice");
  }

  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    Bind();
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_), "CopyToHost");
    Check(cudaStreamSynchronize(compute_), "CopyToHost");
    op_times_.Collect();
  }

  absl::Status Synchronize() override {
    Bind();
    Check(cudaStreamSynchronize(compute_), "Synchronize");
    op_times_.Collect();
    absl::MutexLock lock(&error_mu_);
    return error_;
  }

  absl::StatusOr<Weight> LoadWeight(WeightType type, WeightKind kind, const void* src,
                                    size_t rows, size_t cols) override {
    if (!TakesWeightType(type)) {
      return absl::InvalidArgumentError("cuda backend: weights come as F32, F16 or BF16");
    }
    const size_t count = rows * cols;
    const auto* half = static_cast<const uint16_t*>(src);
    std::vector<float> f32;
    std::vector<uint16_t> bf16;
    const void* upload = src;
    size_t bytes = count * (type == WeightType::kF32 ? 4 : 2);
    WeightType stored = type;
    if (kind == WeightKind::kVector && type != WeightType::kF32) {
      f32.resize(count);
      for (size_t i = 0; i < count; ++i) {
        f32[i] = type == WeightType::kF16 ? HalfToFloat(half[i]) : BFloat16ToFloat(half[i]);
      }
      upload = f32.data();
      bytes = count * 4;
      stored = WeightType::kF32;
    } else if (kind == WeightKind::kMatrix && type == WeightType::kF32) {
      const auto* x = static_cast<const float*>(src);
      bf16.resize(count);
      for (size_t i = 0; i < count; ++i) bf16[i] = FloatToBFloat16(x[i]);
      upload = bf16.data();
      bytes = count * 2;
      stored = WeightType::kBF16;
    }
    auto buf = Allocate(bytes);
    if (!buf.ok()) return buf.status();
    if (cudaError_t e = cudaMemcpy((*buf)->data(), upload, bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("cuda backend: weight upload failed: ", cudaGetErrorString(e)));
    }
    return Weight(*std::move(buf), stored);
  }

  void Embedding(const int32_t* ids, int num_tokens, const Weight& table, int dim,
                 float* out) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "Embedding", num_tokens, compute_);
    // Matrices from LoadWeight are always fp16 or bf16 here.
    Check(cuda::LaunchEmbeddingHalf(ids, num_tokens, static_cast<const uint16_t*>(table.data()),
                                    table.type() == WeightType::kBF16, dim, out, compute_),
          "Embedding");
  }

  void GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                  float* out) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "GatherRows", num_rows, compute_);
    Check(cuda::LaunchGatherRows(x, rows, num_rows, dim, out, compute_), "GatherRows");
  }

  void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
               float* out) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "RmsNorm", rows, compute_);
    Check(cuda::LaunchRmsNorm(x, weight, rows, dim, eps, out, compute_), "RmsNorm");
  }

  void AddRmsNorm(float* x, const float* y, const float* weight, int rows, int dim, float eps,
                  float* out) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "AddRmsNorm", rows, compute_);
    Check(cuda::LaunchAddRmsNorm(x, y, weight, rows, dim, eps, out, compute_), "AddRmsNorm");
  }

  // One row (decode at batch 1): the skinny kernel on the float32 row.
  // Otherwise the rows are cast to the weight's type and
  // cuBLAS runs y^T = W x^T in its column-major terms: W [n, k] row-major is
  // a column-major k x n matrix used transposed; x [m, k] row-major is a
  // column-major k x m matrix; y [m, n] row-major is column-major n x m.
  void Linear(const float* x, int m, int k, const Weight& w, int n, const float* bias,
              float* y) override {
    Bind();
    if (m == 0) return;
    // Matrices from LoadWeight are always fp16 or bf16 here.
    const bool bf16 = w.type() == WeightType::kBF16;
    auto name = [&](const char* what) {
      return op_times_.enabled() ? absl::StrCat("Linear: ", what, " ", n, "x", k) : "";
    };
    if (m <= skinny_gemm_rows_ && cuda::SkinnyGemmSupports(m, k)) {
      cuda::OpTimes::Scope timed(&op_times_, name("skinny GEMM"), m, compute_);
      if (!Check(cuda::LaunchSkinnyGemm(x, m, k, static_cast<const uint16_t*>(w.data()), bf16, n,
                                        y, compute_),
                 "Linear")) {
        return;
      }
    } else if (!CublasLinear(x, m, k, w, bf16, n, y, name("GEMM"))) {
      return;
    }
    if (bias != nullptr) {
      cuda::OpTimes::Scope timed(&op_times_, "Linear: bias", m, compute_);
      Check(cuda::LaunchAddBias(y, bias, m, n, compute_), "Linear bias");
    }
  }

  void Rope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
            const int32_t* positions, const float* inv_freq) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "Rope", num_tokens, compute_);
    Check(cuda::LaunchRope(x, num_tokens, x_stride, num_heads, head_dim, positions, inv_freq,
                           compute_),
          "Rope");
  }

  void SwiGlu(const float* gate_up, int rows, int dim, float* out) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "SwiGlu", rows, compute_);
    Check(cuda::LaunchSwiGlu(gate_up, rows, dim, out, compute_), "SwiGlu");
  }

  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override {
    Bind();
    cuda::OpTimes::Scope timed(&op_times_, "WriteKv", num_tokens, compute_);
    // Float32 pages only (SupportsHalfKvPages is false): fp16 values rounded.
    if (!Check(storage == KvStorage::kF16 ? cudaErrorNotSupported : cudaSuccess, "WriteKv")) {
      return;
    }
    Check(cuda::LaunchWriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim,
                              storage == KvStorage::kF32Fp16Values, static_cast<float*>(k_cache),
                              static_cast<float*>(v_cache), compute_),
          "WriteKv");
  }

  absl::Status SupportsAttention(int num_heads, int num_kv_heads, int head_dim) const override {
    if (cuda::PagedAttentionSupports(num_heads, num_kv_heads, head_dim)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: paged attention takes head_dim a multiple of 32 in [32, 256] and query "
        "heads a multiple of KV heads; the model has head_dim ",
        head_dim, ", ", num_heads, " query and ", num_kv_heads, " KV heads"));
  }

  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                      const AttentionShape& s, const void* k_cache, const void* v_cache,
                      float* out) override {
    Bind();
    int queries = 0;
    for (int b = 0; b < num_seqs; ++b) queries += seqs[b].num_queries;
    cuda::OpTimes::Scope timed(&op_times_, "PagedAttention", queries, compute_);
    if (num_seqs == 0) return;
    cuda::PagedAttentionParams p;
    const int32_t* tables = seqs[0].page_table;
    for (int b = 1; b < num_seqs; ++b) tables = std::min(tables, seqs[b].page_table);
    descs_.resize(num_seqs);
    for (int b = 0; b < num_seqs; ++b) {
      descs_[b] = {seqs[b].query_offset, seqs[b].num_queries, seqs[b].context_len,
                   int32_t(seqs[b].page_table - tables)};
      p.total_queries += seqs[b].num_queries;
      p.max_context_len = std::max(p.max_context_len, seqs[b].context_len);
      p.max_num_queries = std::max(p.max_num_queries, seqs[b].num_queries);
      p.min_num_queries = b == 0 ? seqs[b].num_queries
                                 : std::min(p.min_num_queries, seqs[b].num_queries);
    }
    // Every layer of a forward pass attends over the same batch: upload the
    // descriptors only when they changed (the copy is ordered on the stream
    // after the kernels that read the previous ones).
    const size_t desc_bytes = descs_.size() * sizeof(cuda::AttentionSeqDesc);
    cudaError_t e = cudaSuccess;
    void* dev_descs = descs_dev_.Get(desc_bytes, &e);
    if (!Check(e, "PagedAttention")) return;
    if (dev_descs != uploaded_at_ || uploaded_.size() != descs_.size() ||
        std::memcmp(uploaded_.data(), descs_.data(), desc_bytes) != 0) {
      if (!Check(cudaMemcpyAsync(dev_descs, descs_.data(), desc_bytes, cudaMemcpyHostToDevice,
                                 compute_),
                 "PagedAttention")) {
        return;
      }
      uploaded_ = descs_;
      uploaded_at_ = dev_descs;
    }
    p.q = q;
    p.q_stride = q_stride;
    p.k_cache = static_cast<const float*>(k_cache);
    p.v_cache = static_cast<const float*>(v_cache);
    p.page_tables = tables;
    p.seqs = static_cast<const cuda::AttentionSeqDesc*>(dev_descs);
    p.num_seqs = num_seqs;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = s.head_dim;
    p.page_tokens = s.page_tokens;
    p.scale = s.scale;
    p.out = out;
    void* workspace = attention_ws_.Get(cuda::PagedAttentionWorkspaceBytes(p), &e);
    if (!Check(e, "PagedAttention")) return;
    Check(cuda::LaunchPagedAttention(p, workspace, compute_), "PagedAttention");
  }

  // Masks go up with the requests; the kernel reads a refused token as -inf.
  bool SamplesWithTokenMasks() const override { return true; }

  absl::Status SampleTokens(const float* logits, int vocab, const TokenSampling* params, int num,
                            int32_t* tokens) override {
    Bind();
    if (num > 0) {
      cuda::OpTimes::Scope timed(&op_times_, "SampleTokens", num, compute_);
      EnqueueSample(logits, vocab, params, num, tokens);
    }
    return Synchronize();
  }

  // A transfer's errors are its own: they fail its call (its group), not
  // the compute thread's next step (no Fail()).
  absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src, const int32_t* slots,
                        int num_tokens, uint8_t* out, size_t out_stride) override {
    absl::MutexLock lock(&transfer_mu_);
    Bind();
    if (num_tokens == 0) return absl::OkStatus();
    const cuda::KvRowsLayout layout = RowsLayout(format, block, src);
    const size_t bytes = size_t(num_tokens) * out_stride;
    cudaError_t e = cudaSuccess;
    auto* dev_bytes = static_cast<uint8_t*>(transfer_bytes_.Get(bytes, &e));
    const int32_t* dev_slots = UploadSlots(slots, num_tokens, &e);
    if (e == cudaSuccess) {
      e = cuda::LaunchEncodeKv(format, layout, static_cast<const float*>(src.base), dev_slots,
                               num_tokens, dev_bytes, out_stride, transfer_);
    }
    // Only the rows: bytes between token rows (out_stride beyond them) are
    // the caller's, left as they were (the CPU backend's contract too).
    const size_t row_bytes = size_t(layout.num_arrays) * layout.row_bytes;
    if (e == cudaSuccess) {
      e = cudaMemcpy2DAsync(out, out_stride, dev_bytes, out_stride, row_bytes, num_tokens,
                            cudaMemcpyDeviceToHost, transfer_);
    }
    return TransferStatus(e, cudaStreamSynchronize(transfer_), "EncodeKv");
  }

  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override {
    absl::MutexLock lock(&transfer_mu_);
    Bind();
    if (num_tokens == 0) return absl::OkStatus();
    const cuda::KvRowsLayout layout = RowsLayout(format, block, dst);
    const size_t bytes = size_t(num_tokens) * in_stride;
    cudaError_t e = cudaSuccess;
    auto* dev_bytes = static_cast<uint8_t*>(transfer_bytes_.Get(bytes, &e));
    const int32_t* dev_slots = UploadSlots(slots, num_tokens, &e);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(dev_bytes, in, bytes, cudaMemcpyHostToDevice, transfer_);
    }
    if (e == cudaSuccess) {
      e = cuda::LaunchDecodeKv(format, layout, dev_bytes, in_stride, dev_slots, num_tokens,
                               static_cast<float*>(dst.base), transfer_);
    }
    return TransferStatus(e, cudaStreamSynchronize(transfer_), "DecodeKv");
  }

 private:
  explicit CudaBackend(int device) : device_(device) {}

  // The device is per host thread in CUDA, and two threads call in.
  void Bind() const { cudaSetDevice(device_); }

  bool CublasLinear(const float* x, int m, int k, const Weight& w, bool bf16, int n, float* y,
                    const std::string& timed_as) {
    cudaError_t e = cudaSuccess;
    auto* xh = static_cast<uint16_t*>(gemm_input_.Get(size_t(m) * k * 2, &e));
    if (!Check(e, "Linear")) return false;
    {
      cuda::OpTimes::Scope timed(&op_times_, "Linear: cast input", m, compute_);
      if (!Check(cuda::LaunchCastToHalf(x, size_t(m) * k, bf16, xh, compute_), "Linear")) {
        return false;
      }
    }
    const float alpha = 1.f, beta = 0.f;
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    cuda::OpTimes::Scope timed(&op_times_, timed_as, m, compute_);
    const cublasStatus_t st =
        cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.data(), t, k, xh, t, k,
                     &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    Fail(absl::StrCat("Linear: cuBLAS status ", int(st), " (m=", m, " k=", k, " n=", n, ")"));
    return false;
  }

  // The first of an enqueueing error and the stream's synchronize (which
  // always runs: what was enqueued finishes before its buffers are reused).
  static absl::Status TransferStatus(cudaError_t enqueued, cudaError_t synced, const char* op) {
    const cudaError_t e = enqueued != cudaSuccess ? enqueued : synced;
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cuda backend: ", op, ": ", cudaGetErrorString(e)));
  }

  bool Check(cudaError_t e, const char* op) {
    if (e == cudaSuccess) return true;
    Fail(absl::StrCat(op, ": ", cudaGetErrorString(e)));
    return false;
  }

  void Fail(const std::string& what) {
    absl::MutexLock lock(&error_mu_);
    if (error_.ok()) error_ = absl::InternalError("cuda backend: " + what);
  }

  // The requests and their token masks go up (from pageable memory: staged
  // before the copy call returns), one block per request picks its token,
  // and only the tokens come back.
  void EnqueueSample(const float* logits, int vocab, const TokenSampling* params, int num,
                     int32_t* tokens) {
    const size_t words = (size_t(vocab) + 31) / 32;
    sample_params_.resize(num);
    sample_masks_.clear();
    for (int j = 0; j < num; ++j) {
      const TokenSampling& t = params[j];
      sample_params_[j] = {t.row, t.temperature, t.top_k, t.top_p, t.uniform, nullptr};
      if (t.allowed != nullptr) sample_masks_.insert(sample_masks_.end(), t.allowed, t.allowed + words);
    }
    cudaError_t e = cudaSuccess;
    if (!sample_masks_.empty()) {
      const size_t mask_bytes = sample_masks_.size() * sizeof(uint32_t);
      auto* dev_masks = static_cast<uint32_t*>(sample_masks_dev_.Get(mask_bytes, &e));
      if (!Check(e, "SampleTokens") ||
          !Check(cudaMemcpyAsync(dev_masks, sample_masks_.data(), mask_bytes, cudaMemcpyHostToDevice,
                                 compute_),
                 "SampleTokens")) {
        return;
      }
      for (int j = 0, k = 0; j < num; ++j) {
        if (params[j].allowed != nullptr) sample_params_[j].allowed = dev_masks + size_t(k++) * words;
      }
    }
    const size_t params_bytes = num * sizeof(cuda::SampleParams);
    auto* dev_params = static_cast<cuda::SampleParams*>(sample_params_dev_.Get(params_bytes, &e));
    if (!Check(e, "SampleTokens")) return;
    auto* dev_tokens = static_cast<int32_t*>(sample_tokens_dev_.Get(num * sizeof(int32_t), &e));
    if (!Check(e, "SampleTokens")) return;
    void* workspace = sample_ws_.Get(std::max<size_t>(1, cuda::SampleWorkspaceBytes(num, vocab)), &e);
    if (!Check(e, "SampleTokens") ||
        !Check(cudaMemcpyAsync(dev_params, sample_params_.data(), params_bytes,
                               cudaMemcpyHostToDevice, compute_),
               "SampleTokens") ||
        !Check(cuda::LaunchSample(logits, vocab, dev_params, num, workspace, dev_tokens, compute_),
               "SampleTokens")) {
      return;
    }
    Check(cudaMemcpyAsync(tokens, dev_tokens, num * sizeof(int32_t), cudaMemcpyDeviceToHost,
                          compute_),
          "SampleTokens");
  }

  static cuda::KvRowsLayout RowsLayout(KvFormat format, int block, const KvArrays& a) {
    return cuda::KvRowsLayout{a.num_arrays, a.array_values, a.num_heads, a.head_dim, block,
                              KvRowBytes(format, a.num_heads, a.head_dim, block)};
  }

  // Slots go host -> pinned -> device on the transfer stream (the caller's
  // array may be pageable and short-lived). Transfer lock held.
  const int32_t* UploadSlots(const int32_t* slots, int n, cudaError_t* e) {
    if (size_t(n) > pinned_slots_cap_) {
      cudaFreeHost(pinned_slots_);
      pinned_slots_ = nullptr;
      pinned_slots_cap_ = 0;
      if ((*e = cudaHostAlloc(reinterpret_cast<void**>(&pinned_slots_), n * sizeof(int32_t),
                              cudaHostAllocPortable)) != cudaSuccess) {
        return nullptr;
      }
      pinned_slots_cap_ = n;
    }
    std::memcpy(pinned_slots_, slots, n * sizeof(int32_t));
    auto* dev = static_cast<int32_t*>(transfer_slots_.Get(n * sizeof(int32_t), e));
    if (dev == nullptr) return nullptr;
    *e = cudaMemcpyAsync(dev, pinned_slots_, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                         transfer_);
    return dev;
  }

  const int device_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t transfer_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  // Compute-thread scratch.
  Scratch gemm_input_, attention_ws_, descs_dev_;
  Scratch sample_params_dev_, sample_tokens_dev_, sample_ws_, sample_masks_dev_;
  std::vector<cuda::SampleParams> sample_params_;
  std::vector<uint32_t> sample_masks_;  // the masked requests', in order
  std::vector<cuda::AttentionSeqDesc> descs_, uploaded_;
  const void* uploaded_at_ = nullptr;

  // Transfer-thread state.
  absl::Mutex transfer_mu_;
  Scratch transfer_bytes_ ABSL_GUARDED_BY(transfer_mu_);
  Scratch transfer_slots_ ABSL_GUARDED_BY(transfer_mu_);
  int32_t* pinned_slots_ ABSL_GUARDED_BY(transfer_mu_) = nullptr;
  size_t pinned_slots_cap_ ABSL_GUARDED_BY(transfer_mu_) = 0;

  absl::Mutex error_mu_;
  absl::Status error_ ABSL_GUARDED_BY(error_mu_);

  // Rows up to which Linear takes the skinny kernel: 1 (measured faster than
  // cast + cuBLAS at one row, slower at 8: docs/cuda.md); KVCAST_CUDA_GEMM=
  // cublas or =skinny (up to 8 rows) for A/B measurements and tests.
  const int skinny_gemm_rows_ = EnvIs("KVCAST_CUDA_GEMM", "cublas")   ? 0
                                : EnvIs("KVCAST_CUDA_GEMM", "skinny") ? cuda::kSkinnyGemmMaxRows
                                                                      : 1;
  // Compute-stream ops only (the compute thread's).
  cuda::OpTimes op_times_{EnvIs("KVCAST_CUDA_OP_TIMES", "1")};
};

}  // namespace

static const bool kCudaRegistered = RegisterBackend("cuda", &CudaBackend::Create);

}  // namespace kvcast
