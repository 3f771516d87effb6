// FakeWorker: an in-process prefill or decode worker speaking the real
// kvcast.v1.Prefill / Decode protocol, for testing the scheduler's
// orchestration (retry, stall resume, PD fusion, cancellation, limits)
// without processes or a model.
//
// Its "model" is a rule the tests can compute: the token after a sequence
// of length n is NextToken(n). So a generation resumed elsewhere with
// prompt + tokens so far continues exactly where the first left off, as a
// real model with the same KV would.
//
// Faults are scripted per worker (FakeScript) or shared by several through
// a counter (`faults_left`: the first calls anywhere misbehave, whichever
// worker the router picks first).
#ifndef KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_WORKER_H_
#define KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_WORKER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "kvcast/v1/worker.grpc.pb.h"

namespace kvcast::scheduler::testing {

constexpr int kFakeVocab = 1000;
constexpr int kFakeChunk = 128;
constexpr int kFakeContext = 4096;
constexpr int32_t kFakeEos = 2;

// Never EOS: generations end by max_tokens unless a test says otherwise.
inline int32_t NextToken(size_t sequence_len) { return int32_t(10 + (sequence_len * 7) % 900); }

struct FakeScript {
  enum class Fault {
    kNone,
    kUnavailable,  // fail with UNAVAILABLE after `after_tokens` tokens (decode) / at once
    kStall,        // go silent after `after_tokens` tokens, until cancelled
    kOutOfRange,   // fail with OUT_OF_RANGE at once (a request's own fault)
  };
  Fault prefill = Fault::kNone;
  Fault decode = Fault::kNone;
  int after_tokens = 0;
  // Shared by workers: while positive, each call (of this worker's role)
  // takes one and misbehaves; null: every call does.
  std::shared_ptr<std::atomic<int>> faults_left;
};

class FakeWorker final : public v1::Prefill::Service, public v1::Decode::Service {
 public:
  FakeWorker(std::string id, v1::WorkerRole role, FakeScript script = {});
  ~FakeWorker() override;

  const std::string& id() const { return id_; }
  // What Register sends: grpc_address = id (the test's channel factory maps
  // it to channel()).
  v1::RegisterRequest Registration() const;
  std::shared_ptr<grpc::Channel> channel();

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::PrefillReply>* writer) override;
  grpc::Status Decode(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) override;

  // What it saw.
  int prefill_calls() const;
  std::vector<v1::PrefillRequest> prefill_requests() const;
  std::vector<v1::DecodeStart> decode_starts() const;
  // Calls that ended because the scheduler cancelled them.
  int cancelled_calls() const;

 private:
  bool TakeFault(FakeScript::Fault f) const;
  // Blocks until the call is cancelled (at most 30 s); true if it was.
  bool AwaitCancel(grpc::ServerContext* ctx);
  // Counts the call as cancelled if it was; true if so.
  bool NoteIfCancelled(grpc::ServerContext* ctx);

  const std::string id_;
  const v1::WorkerRole role_;
  const FakeScript script_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::vector<v1::PrefillRequest> prefills_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DecodeStart> starts_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvcast::scheduler::testing

#endif  // KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_WORKER_H_
