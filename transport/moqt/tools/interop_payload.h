// Deterministic object payloads shared with the Python interop scripts
// (tests/interop/payloads.py, definition in tests/interop/README.md):
//   block(i) = SHA-256("kvcast-interop:{seed}:{group}:{object}:{i}")
//   payload  = (block(0) || block(1) || ...)[0:size]
#ifndef KVCAST_TRANSPORT_MOQT_TOOLS_INTEROP_PAYLOAD_H_
#define KVCAST_TRANSPORT_MOQT_TOOLS_INTEROP_PAYLOAD_H_

#include <cstdint>
#include <string>

namespace kvcast::moqt {

std::string InteropPayload(uint64_t seed, uint64_t group, uint64_t object, size_t size);

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_TOOLS_INTEROP_PAYLOAD_H_
