// Test-only helpers for the gRPC tests: raw (ByteBuffer) calls, a health
// check without the generated health proto (Debian's dev package has none),
// and a service whose one method sleeps.
#ifndef KVCAST_SERVICES_COMMON_INTERNAL_GRPC_TEST_UTIL_H_
#define KVCAST_SERVICES_COMMON_INTERNAL_GRPC_TEST_UTIL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

#include <atomic>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvcast::services::testing {

inline grpc::ByteBuffer ToBuffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string FromBuffer(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

struct CallResult {
  grpc::Status status;
  std::string response;
};

// A unary call of `method` ("/pkg.Service/Method") with a deadline.
inline CallResult RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                          const std::string& request, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::ByteBuffer req = ToBuffer(request), resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  return {status, FromBuffer(resp)};
}

// grpc.health.v1.HealthCheckResponse.ServingStatus values.
enum HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2 };

// grpc.health.v1.Health/Check for `service`; returns the call's status and
// the response's status field (-1 when the call failed or did not parse).
inline std::pair<grpc::Status, int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                                                const std::string& service,
                                                absl::Duration timeout = absl::Seconds(5)) {
  // HealthCheckRequest { string service = 1; }; names here are < 128 bytes.
  std::string req = service.empty() ? "" : std::string("\x0a", 1) + char(service.size()) + service;
  CallResult r = RawCall(channel, "/grpc.health.v1.Health/Check", req, timeout);
  if (!r.status.ok()) return {r.status, -1};
  // HealthCheckResponse { ServingStatus status = 1; }: absent means 0.
  if (r.response.empty()) return {r.status, 0};
  if (r.response.size() != 2 || r.response[0] != 0x08) return {r.status, -1};
  return {r.status, r.response[1]};
}

// Service "kvcast.test.Sleeper", method Sleep: the request is a decimal
// number of milliseconds to sleep, -1 for "until cancelled". Answers "done"
// or CANCELLED.
class SleepService : public grpc::Service {
 public:
  static constexpr const char* kName = "kvcast.test.Sleeper";
  static constexpr const char* kMethod = "/kvcast.test.Sleeper/Sleep";
  SleepService() {
    AddMethod(new grpc::internal::RpcServiceMethod(
        kMethod, grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<SleepService, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](SleepService* self, grpc::ServerContext* ctx, const grpc::ByteBuffer* req,
               grpc::ByteBuffer* resp) { return self->Sleep(ctx, *req, resp); },
            this)));
  }
  std::atomic<int> started{0};

 private:
  grpc::Status Sleep(grpc::ServerContext* ctx, const grpc::ByteBuffer& req,
                     grpc::ByteBuffer* resp) {
    ++started;
    int ms = 0;
    if (!absl::SimpleAtoi(FromBuffer(req), &ms)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "want milliseconds");
    }
    absl::Time end = ms < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(ms);
    while (absl::Now() < end) {
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      absl::SleepFor(absl::Milliseconds(5));
    }
    *resp = ToBuffer("done");
    return grpc::Status::OK;
  }
};

}  // namespace kvcast::services::testing

#endif  // KVCAST_SERVICES_COMMON_INTERNAL_GRPC_TEST_UTIL_H_
