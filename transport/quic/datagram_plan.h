// How large a connection's UDP datagrams may be, chosen at its start from
// TransportOptions::max_udp_payload and what the kernel knows of the path.
//
//   configured > 0      that size (at most kMaxUdpDatagram) from the first
//                       packet, no path MTU discovery: for paths known to
//                       carry it.
//   0, peer on this host (its address is one of ours: loopback, a local
//                       address) -> kLargeUdpPayload (16,376 bytes: four fit
//                       one GSO send of at most 65,507), capped by the
//                       route's MTU, from the first packet.
//   0, route MTU above Ethernet's (jumbo frames) -> path MTU discovery
//                       probing the route's MTU first (capped at
//                       kLargeUdpPayload), then the Ethernet sizes.
//   0, otherwise        ngtcp2's 1452 bytes with its own discovery probes.
//
// A datagram larger than the path carries is lost, so only the peer's own
// host is trusted without probing: a local route's MTU can not promise the
// hops behind it.
#ifndef KVCAST_TRANSPORT_QUIC_DATAGRAM_PLAN_H_
#define KVCAST_TRANSPORT_QUIC_DATAGRAM_PLAN_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/quic/udp_socket.h"

namespace kvcast::quic {

inline constexpr size_t kLargeUdpPayload = 16376;
// ngtcp2's default largest payload (a 1500-byte MTU less IPv6 and UDP).
inline constexpr size_t kDefaultUdpPayload = 1452;

// What the kernel knows of the path to a peer (LookUpPath).
struct PathInfo {
  bool local = false;  // the peer's address is assigned on this host
  size_t mtu = 0;      // the route's MTU (IP_MTU); 0 when unknown
};
// Asks the kernel: a bind to the peer's address succeeds only for one of
// ours; a UDP socket connected to it reports the route's MTU.
PathInfo LookUpPath(const SocketAddress& peer);

struct DatagramPlan {
  size_t max_payload = kDefaultUdpPayload;  // ngtcp2's max_tx_udp_payload_size
  bool fixed = false;  // send max_payload from the start (no_tx_udp_payload_size_shaping)
  std::vector<uint16_t> probes;  // discovery probes, in order; empty: ngtcp2's own
};
// `family` is AF_INET or AF_INET6 (their IP + UDP headers: 28 or 48 bytes).
DatagramPlan PlanDatagrams(size_t configured, const PathInfo& path, int family);

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_DATAGRAM_PLAN_H_
