// Status propagation macros for Debian's Abseil 20220623, which ships
// absl::Status but not its macros.
//
//   RETURN_IF_ERROR(expr);            returns the status of `expr` if not OK.
//   ASSIGN_OR_RETURN(lhs, expr);      evaluates a StatusOr `expr`; on error
//                                     returns its status, else moves the value
//                                     into `lhs` (a declaration or an lvalue).
#ifndef KVCAST_COMMON_STATUS_MACROS_H_
#define KVCAST_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVCAST_CONCAT_INNER(a, b) a##b
#define KVCAST_CONCAT(a, b) KVCAST_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status kvcast_status_ = (expr);          \
    if (!kvcast_status_.ok()) return kvcast_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  KVCAST_ASSIGN_OR_RETURN_IMPL(KVCAST_CONCAT(kvcast_statusor_, __LINE__), lhs, expr)

#define KVCAST_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // KVCAST_COMMON_STATUS_MACROS_H_
