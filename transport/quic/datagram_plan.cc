#include "transport/quic/datagram_plan.h"

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>

namespace kvcast::quic {

PathInfo LookUpPath(const SocketAddress& peer) {
  PathInfo info;
  const int family = peer.family();
  if (family != AF_INET && family != AF_INET6) return info;
  SocketAddress any_port = peer;
  if (family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(any_port.sa())->sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6*>(any_port.sa())->sin6_port = 0;
  }
  const int probe = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return info;
  info.local = bind(probe, any_port.sa(), any_port.len) == 0;
  close(probe);
  const int route = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (route < 0) return info;
  int mtu = 0;
  socklen_t len = sizeof(mtu);
  if (connect(route, peer.sa(), peer.len) == 0 &&
      getsockopt(route, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6,
                 family == AF_INET ? IP_MTU : IPV6_MTU, &mtu, &len) == 0 &&
      mtu > 0) {
    info.mtu = size_t(mtu);
  }
  close(route);
  return info;
}

DatagramPlan PlanDatagrams(size_t configured, const PathInfo& path, int family) {
  DatagramPlan plan;
  if (configured > 0) {
    plan.max_payload = std::min(configured, kMaxUdpDatagram);
    plan.fixed = true;
    return plan;
  }
  const size_t headers = family == AF_INET6 ? 48 : 28;
  const size_t route = path.mtu > headers ? path.mtu - headers : 0;
  if (path.local) {
    plan.max_payload = route > 0 ? std::min(route, kLargeUdpPayload) : kLargeUdpPayload;
    plan.fixed = plan.max_payload > kDefaultUdpPayload;
    if (!plan.fixed) plan.max_payload = kDefaultUdpPayload;
    return plan;
  }
  if (route > 1500 - headers) {  // jumbo frames: probe the route's size first
    plan.max_payload = std::min(route, kLargeUdpPayload);
    for (size_t size : {plan.max_payload, size_t{1500} - headers, size_t{1280} - headers}) {
      if (size > 1200 && size <= plan.max_payload &&
          std::find(plan.probes.begin(), plan.probes.end(), size) == plan.probes.end()) {
        plan.probes.push_back(uint16_t(size));
      }
    }
  }
  return plan;
}

}  // namespace kvcast::quic
