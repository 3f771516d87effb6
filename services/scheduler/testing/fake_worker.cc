#include "services/scheduler/testing/fake_worker.h"

#include <chrono>
#include <thread>

namespace kvcast::scheduler::testing {

FakeWorker::FakeWorker(std::string id, v1::WorkerRole role, FakeScript script)
    : id_(std::move(id)), role_(role), script_(std::move(script)) {
  grpc::ServerBuilder builder;
  // Loopback TCP, not an in-process channel: gRPC 1.51's in-process
  // transport deadlocks the scheduler's bidirectional Decode stream.
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  if (role_ == v1::WORKER_ROLE_PREFILL) {
    builder.RegisterService(static_cast<v1::Prefill::Service*>(this));
  } else {
    builder.RegisterService(static_cast<v1::Decode::Service*>(this));
  }
  server_ = builder.BuildAndStart();
}

FakeWorker::~FakeWorker() { server_->Shutdown(std::chrono::system_clock::now()); }

v1::RegisterRequest FakeWorker::Registration() const {
  v1::RegisterRequest req;
  v1::WorkerInfo* info = req.mutable_worker();
  info->set_worker_id(id_);
  info->set_role(role_);
  info->set_grpc_address(id_);
  info->set_moqt_address(id_ + ":moqt");
  info->set_model_name("fake");
  info->set_model_id("0123456789abcdef0123456789abcdef");
  info->set_chunk_tokens(kFakeChunk);
  info->set_page_tokens(16);
  info->set_total_pages(kFakeContext);
  info->set_vocab_size(kFakeVocab);
  info->set_max_sequence_len(kFakeContext);
  info->add_eos_token_ids(kFakeEos);
  req.mutable_load()->set_free_pages(kFakeContext);
  return req;
}

std::shared_ptr<grpc::Channel> FakeWorker::channel() {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                             grpc::InsecureChannelCredentials());
}

bool FakeWorker::TakeFault(FakeScript::Fault f) const {
  if (f == FakeScript::Fault::kNone) return false;
  if (script_.faults_left == nullptr) return true;
  return script_.faults_left->fetch_sub(1) > 0;
}

bool FakeWorker::AwaitCancel(grpc::ServerContext* ctx) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ctx->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return NoteIfCancelled(ctx);
}

bool FakeWorker::NoteIfCancelled(grpc::ServerContext* ctx) {
  if (!ctx->IsCancelled()) return false;
  absl::MutexLock lock(&mu_);
  ++cancelled_;
  return true;
}

grpc::Status FakeWorker::Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* request,
                                 grpc::ServerWriter<v1::PrefillReply>* writer) {
  {
    absl::MutexLock lock(&mu_);
    prefills_.push_back(*request);
  }
  const FakeScript::Fault fault = TakeFault(script_.prefill) ? script_.prefill : FakeScript::Fault::kNone;
  if (fault == FakeScript::Fault::kUnavailable) {
    return grpc::Status(grpc::UNAVAILABLE, id_ + " is going away");
  }
  if (fault == FakeScript::Fault::kOutOfRange) {
    return grpc::Status(grpc::OUT_OF_RANGE, "the prompt does not fit");
  }
  const int n = request->tokens_size();
  v1::PrefillReply reply;
  for (int done = kFakeChunk; done < n; done += kFakeChunk) {
    reply.mutable_progress()->set_done_tokens(done);
    if (!writer->Write(reply)) return grpc::Status(grpc::CANCELLED, "gone");
  }
  if (fault == FakeScript::Fault::kStall) {
    AwaitCancel(ctx);
    return grpc::Status(grpc::CANCELLED, "cancelled while stalled");
  }
  v1::PrefillResponse* r = reply.mutable_result();
  r->set_first_token(NextToken(size_t(n)));
  r->set_prompt_digest("fake-digest");
  r->set_computed_tokens(n);
  writer->Write(reply);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Decode(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) {
  v1::DecodeRequest msg;
  if (!stream->Read(&msg) || !msg.has_start()) {
    return grpc::Status(grpc::INVALID_ARGUMENT, "the first message must be a start");
  }
  const v1::DecodeStart start = msg.start();
  {
    absl::MutexLock lock(&mu_);
    starts_.push_back(start);
  }
  const FakeScript::Fault fault = TakeFault(script_.decode) ? script_.decode : FakeScript::Fault::kNone;
  if (fault == FakeScript::Fault::kOutOfRange) {
    return grpc::Status(grpc::OUT_OF_RANGE, "the sequence does not fit this worker's pages");
  }
  std::vector<int32_t> seq(start.prompt().begin(), start.prompt().end());
  int produced = 0;
  v1::DecodeResponse r;
  if (start.kv_tokens() > 0) {
    r.set_kv_ready(true);
    r.set_landed_tokens(start.kv_tokens());
    if (!stream->Write(r)) return grpc::Status(grpc::CANCELLED, "gone");
    r.Clear();
  }
  if (start.kv_tokens() == int(seq.size())) {
    // The prefill's first token follows the start.
    if (!stream->Read(&msg) || !msg.has_first_token()) {
      NoteIfCancelled(ctx);
      return grpc::Status(grpc::CANCELLED, "no first token");
    }
    seq.push_back(msg.first_token());
    produced = 1;
  }
  for (int sent = 0; produced < start.max_tokens(); ++sent) {
    if (fault != FakeScript::Fault::kNone && sent == script_.after_tokens) {
      if (fault == FakeScript::Fault::kUnavailable) {
        return grpc::Status(grpc::UNAVAILABLE, id_ + " is going away");
      }
      AwaitCancel(ctx);
      return grpc::Status(grpc::CANCELLED, "cancelled while stalled");
    }
    const int32_t t = NextToken(seq.size());
    seq.push_back(t);
    ++produced;
    r.Clear();
    r.add_token_ids(t);
    if (produced == start.max_tokens()) r.set_finish_reason(v1::FINISH_REASON_LENGTH);
    if (!stream->Write(r)) {
      NoteIfCancelled(ctx);
      return grpc::Status(grpc::CANCELLED, "gone");
    }
  }
  return grpc::Status::OK;
}

int FakeWorker::prefill_calls() const {
  absl::MutexLock lock(&mu_);
  return int(prefills_.size());
}

std::vector<v1::PrefillRequest> FakeWorker::prefill_requests() const {
  absl::MutexLock lock(&mu_);
  return prefills_;
}

std::vector<v1::DecodeStart> FakeWorker::decode_starts() const {
  absl::MutexLock lock(&mu_);
  return starts_;
}

int FakeWorker::cancelled_calls() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

}  // namespace kvcast::scheduler::testing
