#include "transport/quic/datagram_plan.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

namespace kvcast::quic {
namespace {

TEST(DatagramPlanTest, ConfiguredSizeIsUsedFromTheStart) {
  const DatagramPlan p = PlanDatagrams(8952, PathInfo{false, 1500}, AF_INET);
  EXPECT_EQ(p.max_payload, 8952u);
  EXPECT_TRUE(p.fixed);
  EXPECT_TRUE(p.probes.empty());
  EXPECT_EQ(PlanDatagrams(1 << 20, PathInfo{}, AF_INET).max_payload, kMaxUdpDatagram);
}

TEST(DatagramPlanTest, ThisHostGetsLargeDatagramsAtOnce) {
  const DatagramPlan lo = PlanDatagrams(0, PathInfo{true, 65536}, AF_INET);
  EXPECT_EQ(lo.max_payload, kLargeUdpPayload);
  EXPECT_TRUE(lo.fixed);
  // Four fit one GSO send.
  EXPECT_LE(4 * kLargeUdpPayload, 65507u);
  // A local address whose route's MTU is smaller: the route's size.
  const DatagramPlan v6 = PlanDatagrams(0, PathInfo{true, 9000}, AF_INET6);
  EXPECT_EQ(v6.max_payload, 9000u - 48);
  EXPECT_TRUE(v6.fixed);
  // ... and never below the default.
  const DatagramPlan small = PlanDatagrams(0, PathInfo{true, 1280}, AF_INET);
  EXPECT_EQ(small.max_payload, kDefaultUdpPayload);
  EXPECT_FALSE(small.fixed);
}

TEST(DatagramPlanTest, JumboRoutesAreProbedLargestFirst) {
  const DatagramPlan p = PlanDatagrams(0, PathInfo{false, 9000}, AF_INET);
  EXPECT_EQ(p.max_payload, 8972u);
  EXPECT_FALSE(p.fixed);
  EXPECT_EQ(p.probes, (std::vector<uint16_t>{8972, 1472, 1252}));
}

TEST(DatagramPlanTest, EthernetAndUnknownRoutesKeepNgtcp2sDefaults) {
  for (size_t mtu : {size_t{0}, size_t{1500}, size_t{1280}}) {
    const DatagramPlan p = PlanDatagrams(0, PathInfo{false, mtu}, AF_INET6);
    EXPECT_EQ(p.max_payload, kDefaultUdpPayload) << mtu;
    EXPECT_FALSE(p.fixed);
    EXPECT_TRUE(p.probes.empty());
  }
}

SocketAddress Ipv4(const char* ip, uint16_t port) {
  SocketAddress a;
  auto* in = reinterpret_cast<sockaddr_in*>(a.sa());
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  inet_pton(AF_INET, ip, &in->sin_addr);
  a.len = sizeof(sockaddr_in);
  return a;
}

TEST(DatagramPlanTest, LoopbackIsThisHostWithLoopbacksMtu) {
  const PathInfo lo = LookUpPath(Ipv4("127.0.0.1", 4433));
  EXPECT_TRUE(lo.local);
  EXPECT_GE(lo.mtu, 16384u);  // Linux's loopback: 65536
  // TEST-NET-1 is no address of this host, whatever its routes.
  EXPECT_FALSE(LookUpPath(Ipv4("192.0.2.1", 4433)).local);
}

}  // namespace
}  // namespace kvcast::quic
