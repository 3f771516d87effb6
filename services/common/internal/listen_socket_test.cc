// ListenTcp: a listening, non-blocking, close-on-exec socket, and errors
// that name the address.
#include "services/common/internal/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::services::internal {
namespace {

// A blocking IPv4 connection to 127.0.0.1:`port` (its fd), or -1.
int ConnectLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

// The next connection on the non-blocking `listener` (waits up to 1 s), or -1.
int AcceptOne(int listener) {
  for (int i = 0; i < 100; ++i) {
    const int conn = accept(listener, nullptr, nullptr);
    if (conn >= 0) return conn;
    usleep(10'000);
  }
  return -1;
}

TEST(ListenSocketTest, ListensNonBlockingAndCloseOnExecOnThePortItReports) {
  absl::StatusOr<int> fd = ListenTcp("127.0.0.1", 0, "test");
  ASSERT_TRUE(fd.ok()) << fd.status();
  const uint16_t port = LocalPort(*fd);
  ASSERT_NE(port, 0);
  EXPECT_TRUE(fcntl(*fd, F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(fcntl(*fd, F_GETFD) & FD_CLOEXEC);
  // Listening: a client connects and is accepted.
  const int client = ConnectLoopback(port);
  ASSERT_GE(client, 0);
  const int conn = AcceptOne(*fd);
  EXPECT_GE(conn, 0);
  close(conn);
  close(client);
  close(*fd);
}

TEST(ListenSocketTest, APortInUseIsRefusedWithItsErrnoNamingTheAddress) {
  absl::StatusOr<int> first = ListenTcp("127.0.0.1", 0, "first");
  ASSERT_TRUE(first.ok()) << first.status();
  const uint16_t port = LocalPort(*first);
  absl::StatusOr<int> second = ListenTcp("127.0.0.1", port, "the metrics address 127.0.0.1");
  ASSERT_FALSE(second.ok());
  // EADDRINUSE's code, as absl maps errno values.
  EXPECT_EQ(second.status().code(), absl::ErrnoToStatus(EADDRINUSE, "").code()) << second.status();
  EXPECT_NE(std::string(second.status().message()).find("bind the metrics address 127.0.0.1"),
            std::string::npos)
      << second.status();
  // SO_REUSEADDR: once the first is closed, its port binds again at once,
  // though a connection it accepted and closed first is in TIME_WAIT.
  const int client = ConnectLoopback(port);
  ASSERT_GE(client, 0);
  const int conn = AcceptOne(*first);
  ASSERT_GE(conn, 0);
  close(conn);
  char byte;
  EXPECT_EQ(read(client, &byte, 1), 0);  // the server's FIN: its side closed first
  close(client);
  close(*first);
  absl::StatusOr<int> again = ListenTcp("127.0.0.1", port, "again");
  ASSERT_TRUE(again.ok()) << again.status();
  close(*again);
}

TEST(ListenSocketTest, AnAddressThatDoesNotResolveIsInvalid) {
  absl::StatusOr<int> fd = ListenTcp("not an address", 0, "--metrics_host");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument) << fd.status();
  EXPECT_NE(std::string(fd.status().message()).find("listen address --metrics_host"),
            std::string::npos)
      << fd.status();
  EXPECT_EQ(LocalPort(-1), 0);
}

}  // namespace
}  // namespace kvcast::services::internal
