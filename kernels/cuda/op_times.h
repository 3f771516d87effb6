// GPU time by op, to find where a forward pass goes (KVCAST_CUDA_OP_TIMES=1;
// gpu_bench --op_times). Each timed op brackets its launches with two events
// on the compute stream; Collect(), called once the stream is synchronized,
// adds the elapsed times to totals keyed by (op, rows), so a decode step's
// ops (rows = batch) and a prompt's (rows = tokens) are told apart. Off, a
// Scope costs one branch.
#ifndef KVCAST_KERNELS_CUDA_OP_TIMES_H_
#define KVCAST_KERNELS_CUDA_OP_TIMES_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvcast::cuda {

class OpTimes {
 public:
  explicit OpTimes(bool enabled) : enabled_(enabled) {}
  ~OpTimes();
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  bool enabled() const { return enabled_; }

  // Times the launches made while it lives (not nested).
  class Scope {
   public:
    Scope(OpTimes* t, std::string_view op, int rows, cudaStream_t s) : t_(t), s_(s) {
      if (t_->enabled_) t_->Begin(std::string(op), rows, s_);
    }
    ~Scope() {
      if (t_->enabled_) t_->End(s_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTimes* const t_;
    const cudaStream_t s_;
  };

  // Adds the ended ops' times to the totals (an op whose Scope is still open
  // waits for the next call); the stream they ran on must be synchronized.
  void Collect();
  // One line per (op, rows), by total time: calls, total ms, median us (the
  // first calls of a shape pay lazy loading and cuBLAS heuristics: the
  // median is the steady cost); then per rows value the sum of calls x
  // median. Empty when nothing was timed.
  std::string Report() const;

 private:
  struct Pending {
    std::string op;
    int rows;
    cudaEvent_t start, stop;
    bool ended = false;
  };
  void Begin(std::string op, int rows, cudaStream_t s);
  void End(cudaStream_t s);
  cudaEvent_t NewEvent();

  const bool enabled_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::pair<std::string, int>, std::vector<float>> times_ms_;
};

}  // namespace kvcast::cuda

#endif  // KVCAST_KERNELS_CUDA_OP_TIMES_H_
