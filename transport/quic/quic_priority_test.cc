// Stream priorities: with two streams queued at once, all of the lower
// priority value's data is handed to QUIC first; equal priorities take
// turns, a packet each.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "transport/quic/quic_test_util.h"

namespace kvcast::quic {
namespace {

using testing::Pattern;
using testing::QuicTestEnv;
using testing::RecordingHandler;

// A server and one client connection to it, handshake done.
void Connect(QuicTestEnv& env, size_t* client, RecordingHandler** server) {
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(env.client_handler(*c)->WaitHandshake(absl::Seconds(10)));
  *client = *c;
  *server = env.ServerHandler(0);
  ASSERT_NE(*server, nullptr);
}

TEST(QuicPriorityTest, LowerPriorityValueFinishesFirst) {
  QuicTestEnv env;
  size_t c = 0;
  RecordingHandler* server = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(env, &c, &server));
  absl::Mutex mu;
  std::vector<int64_t> fin_order;
  env.Run([&] {
    server->on_data = [&](Connection*, int64_t id, absl::Span<const uint8_t>, bool fin) {
      absl::MutexLock lock(&mu);
      if (fin) fin_order.push_back(id);
    };
  });
  // The later one is smaller: under plain round robin it would finish first.
  const std::string bulk = Pattern(1 << 20, 7), urgent = Pattern(4 << 20, 8);
  int64_t late = -1, first = -1;
  env.Run([&] {
    Connection* conn = env.client(c)->connection();
    late = *conn->OpenUniStream();
    first = *conn->OpenUniStream();
    conn->SetStreamPriority(late, 100);
    conn->SetStreamPriority(first, 1);
    // Queued in the "wrong" order within one task: priority decides.
    ASSERT_TRUE(conn->Send(late, bulk, true).ok());
    ASSERT_TRUE(conn->Send(first, urgent, true).ok());
  });
  ASSERT_TRUE(server->WaitFinCount(2, absl::Seconds(30)));
  absl::MutexLock lock(&mu);
  // The hook runs just after the handler recorded the FIN.
  auto both = [&] { return fin_order.size() == 2; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(5)));
  EXPECT_EQ(fin_order[0], first);
  EXPECT_EQ(fin_order[1], late);
  EXPECT_EQ(server->stream_data(first), urgent);
  EXPECT_EQ(server->stream_data(late), bulk);
}

TEST(QuicPriorityTest, EqualPrioritiesTakeTurns) {
  QuicTestEnv env;
  size_t c = 0;
  RecordingHandler* server = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(env, &c, &server));
  absl::Mutex mu;
  std::map<int64_t, size_t> received;
  size_t other_at_first_fin = 0;
  bool first_fin_seen = false;
  env.Run([&] {
    server->on_data = [&](Connection*, int64_t id, absl::Span<const uint8_t> data, bool fin) {
      absl::MutexLock lock(&mu);
      received[id] += data.size();
      if (fin && !first_fin_seen) {
        first_fin_seen = true;
        for (const auto& [other, bytes] : received) {
          if (other != id) other_at_first_fin = bytes;
        }
      }
    };
  });
  constexpr size_t kBytes = 4 << 20;
  const std::string a = Pattern(kBytes, 3), b = Pattern(kBytes, 4);
  int64_t ida = -1, idb = -1;
  env.Run([&] {
    Connection* conn = env.client(c)->connection();
    ida = *conn->OpenUniStream();
    idb = *conn->OpenUniStream();
    conn->SetStreamPriority(ida, 5);
    conn->SetStreamPriority(idb, 5);
    ASSERT_TRUE(conn->Send(ida, a, true).ok());
    ASSERT_TRUE(conn->Send(idb, b, true).ok());
  });
  ASSERT_TRUE(server->WaitFinCount(2, absl::Seconds(30)));
  EXPECT_EQ(server->stream_data(ida), a);
  EXPECT_EQ(server->stream_data(idb), b);
  absl::MutexLock lock(&mu);
  // Turn by turn, the other stream is nearly done when the first finishes;
  // one after the other, it would have (almost) nothing.
  EXPECT_GT(other_at_first_fin, kBytes * 3 / 4);
}

}  // namespace
}  // namespace kvcast::quic
