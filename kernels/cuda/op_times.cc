#include "kernels/cuda/op_times.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvcast::cuda {

OpTimes::~OpTimes() {
  for (const Pending& p : pending_) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t OpTimes::NewEvent() {
  cudaEvent_t e = nullptr;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else if (cudaEventCreate(&e) != cudaSuccess) {
    return nullptr;
  }
  return e;
}

void OpTimes::Begin(std::string op, int rows, cudaStream_t s) {
  Pending p{std::move(op), rows, NewEvent(), NewEvent()};
  if (p.start == nullptr || p.stop == nullptr) return;
  cudaEventRecord(p.start, s);
  pending_.push_back(p);
}

void OpTimes::End(cudaStream_t s) {
  if (pending_.empty() || pending_.back().ended) return;
  cudaEventRecord(pending_.back().stop, s);
  pending_.back().ended = true;
}

void OpTimes::Collect() {
  std::vector<Pending> open;
  for (Pending& p : pending_) {
    if (!p.ended) {
      open.push_back(std::move(p));
      continue;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      times_ms_[{p.op, p.rows}].push_back(ms);
    }
    free_.push_back(p.start);
    free_.push_back(p.stop);
  }
  pending_ = std::move(open);
}

std::string OpTimes::Report() const {
  if (times_ms_.empty()) return "";
  struct Row {
    std::string op;
    int rows;
    size_t calls;
    double total_ms, median_ms;
  };
  std::vector<Row> rows;
  for (const auto& [key, v] : times_ms_) {
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    double total = 0;
    for (float t : v) total += t;
    rows.push_back({key.first, key.second, v.size(), total, sorted[sorted.size() / 2]});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.rows != b.rows ? a.rows < b.rows : a.calls * a.median_ms > b.calls * b.median_ms;
  });
  std::string out = "| op | rows | calls | total ms | median us |\n|---|---|---|---|---|\n";
  std::map<int, double> steady_ms;
  for (const Row& r : rows) {
    absl::StrAppendFormat(&out, "| %s | %d | %d | %.3f | %.1f |\n", r.op, r.rows, r.calls,
                          r.total_ms, 1e3 * r.median_ms);
    steady_ms[r.rows] += r.calls * r.median_ms;
  }
  for (const auto& [r, ms] : steady_ms) {
    absl::StrAppendFormat(&out, "| all ops, calls x median | %d | | %.3f | |\n", r, ms);
  }
  return out;
}

}  // namespace kvcast::cuda
