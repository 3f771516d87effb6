#include "transport/quic/udp_socket.h"

#include <poll.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::quic {
namespace {

std::unique_ptr<UdpSocket> BindLoopback(UdpSocket::Options options) {
  absl::StatusOr<SocketAddress> addr = SocketAddress::Resolve("127.0.0.1", 0);
  EXPECT_TRUE(addr.ok());
  absl::StatusOr<std::unique_ptr<UdpSocket>> s =
      UdpSocket::Bind(*addr, std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Collects datagrams until `n` arrived or 5 s passed.
std::vector<std::string> ReceiveN(UdpSocket& s, size_t n) {
  std::vector<std::string> got;
  for (int i = 0; i < 50 && got.size() < n; ++i) {
    pollfd p{s.fd(), POLLIN, 0};
    poll(&p, 1, 100);
    s.Receive([&](const SocketAddress&, absl::Span<uint8_t> d) {
      got.emplace_back(reinterpret_cast<const char*>(d.data()), d.size());
    });
  }
  return got;
}

// 40 datagrams of 1000 bytes and a short last one, each filled with its
// index so reordering or bad splitting shows.
std::string Train(size_t* count) {
  std::string data;
  for (int i = 0; i < 40; ++i) data.append(1000, static_cast<char>('A' + i % 26));
  data.append(300, 'z');
  *count = 41;
  return data;
}

void CheckTrain(const std::vector<std::string>& got) {
  ASSERT_EQ(got.size(), 41u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(got[i], std::string(1000, static_cast<char>('A' + i % 26))) << i;
  }
  EXPECT_EQ(got[40], std::string(300, 'z'));
}

TEST(UdpSocketTest, BatchedSendSplitsIntoDatagrams) {
  auto rx = BindLoopback({});
  auto tx = BindLoopback({});
  size_t count;
  std::string data = Train(&count);
  EXPECT_EQ(tx->Send(rx->local_address(),
                     absl::MakeConstSpan(
                         reinterpret_cast<const uint8_t*>(data.data()),
                         data.size()),
                     1000),
            data.size());
  CheckTrain(ReceiveN(*rx, count));
}

TEST(UdpSocketTest, UnbatchedSendSameResult) {
  auto rx = BindLoopback({});
  UdpSocket::Options plain;
  plain.batch_send = false;
  auto tx = BindLoopback(plain);
  size_t count;
  std::string data = Train(&count);
  tx->Send(rx->local_address(),
           absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()),
                               data.size()),
           1000);
  CheckTrain(ReceiveN(*rx, count));
}

TEST(UdpSocketTest, FilterDropsChosenDatagrams) {
  auto rx = BindLoopback({});
  UdpSocket::Options lossy;
  int n = 0;
  lossy.filter = [&n](absl::Span<const uint8_t>) { return ++n % 2 == 1; };
  auto tx = BindLoopback(lossy);
  std::string data(10 * 100, 'x');
  EXPECT_EQ(tx->Send(rx->local_address(),
                     absl::MakeConstSpan(
                         reinterpret_cast<const uint8_t*>(data.data()),
                         data.size()),
                     100),
            data.size());  // Dropped ones count as taken.
  EXPECT_EQ(ReceiveN(*rx, 5).size(), 5u);
  EXPECT_EQ(n, 10);
}

TEST(UdpSocketTest, AddressFormattingAndErrors) {
  absl::StatusOr<SocketAddress> v6 = SocketAddress::Resolve("[::1]", 443);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->ToString(), "[::1]:443");
  EXPECT_EQ(SocketAddress::Resolve("1.2.3.4", 80)->ToString(), "1.2.3.4:80");
  EXPECT_EQ(SocketAddress::Resolve("no such host!", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto a = BindLoopback({});
  absl::StatusOr<std::unique_ptr<UdpSocket>> again =
      UdpSocket::Bind(a->local_address(), {});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvcast::quic
