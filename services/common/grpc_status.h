// absl::Status <-> grpc::Status: the canonical codes map one to one.
#ifndef KVCAST_SERVICES_COMMON_GRPC_STATUS_H_
#define KVCAST_SERVICES_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kvcast::services {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_GRPC_STATUS_H_
