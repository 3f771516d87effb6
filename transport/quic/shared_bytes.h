// SharedBytes: bytes that another object keeps alive, handed on without a
// copy (a relay's cached object, a publisher's encoded batch) to every
// stream that sends them. Whoever holds a SharedBytes holds `owner`, so the
// bytes live until the last holder lets go; nobody may change them while
// they are shared.
//
// Thread safety: as std::shared_ptr (the count is atomic; the bytes are
// read-only).
#ifndef KVCAST_TRANSPORT_QUIC_SHARED_BYTES_H_
#define KVCAST_TRANSPORT_QUIC_SHARED_BYTES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/types/span.h"

namespace kvcast::quic {

struct SharedBytes {
  std::shared_ptr<const void> owner;  // keeps `bytes` alive
  absl::Span<const uint8_t> bytes;
};

// All of `s`, kept alive by `s` (which must not be null).
inline SharedBytes ShareString(std::shared_ptr<const std::string> s) {
  const absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(s->data()), s->size());
  return {std::move(s), bytes};
}

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_SHARED_BYTES_H_
