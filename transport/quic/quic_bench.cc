// quic_bench: loopback bulk throughput of the QUIC transport, with send
// batching (UDP GSO / sendmmsg) on and off in the same run.
//
//   bazel run -c opt //transport/quic:quic_bench -- --mib=256 --runs=3
//
// Client and server each run their own loop thread; the client streams
// --mib MiB on one stream, refilling 8 MiB whenever OnStreamDrained says the
// queue is empty; the clock stops when the server has seen FIN.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "transport/quic/quic_test_util.h"

ABSL_FLAG(int, mib, 256, "MiB per transfer");
ABSL_FLAG(int, runs, 3, "transfers per mode (best is reported)");

namespace kvcast::quic {
namespace {

constexpr size_t kChunk = 8 << 20;

class Sink : public ConnectionHandler {
 public:
  void OnHandshakeDone(Connection*) override {}
  void OnStreamData(Connection*, int64_t, absl::Span<const uint8_t> data,
                    bool fin) override {
    bytes += data.size();
    if (fin) done.Notify();
  }
  void OnClosed(Connection*, const absl::Status&) override {}
  uint64_t bytes = 0;
  absl::Notification done;
};

class Source : public ConnectionHandler {
 public:
  Source(const std::string* chunk, uint64_t total)
      : chunk_(chunk), total_(total) {}
  void OnHandshakeDone(Connection* conn) override {
    stream_ = *conn->OpenBidiStream();
    start = absl::Now();
    Refill(conn);
  }
  void OnStreamData(Connection*, int64_t, absl::Span<const uint8_t>,
                    bool) override {}
  void OnStreamDrained(Connection* conn, int64_t) override { Refill(conn); }
  void OnClosed(Connection*, const absl::Status& st) override {
    if (!st.ok() && !absl::IsCancelled(st)) {  // Cancelled: our teardown.
      std::fprintf(stderr, "client closed: %s\n", st.ToString().c_str());
    }
  }
  absl::Time start;

 private:
  void Refill(Connection* conn) {
    if (sent_ >= total_) return;
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, total_ - sent_));
    sent_ += n;
    absl::Status st = conn->Send(stream_, absl::string_view(*chunk_).substr(0, n),
                                 sent_ == total_);
    if (!st.ok()) std::fprintf(stderr, "send: %s\n", st.ToString().c_str());
  }
  const std::string* chunk_;
  const uint64_t total_;
  uint64_t sent_ = 0;
  int64_t stream_ = -1;
};

// MiB/s of one transfer, or a negative value on failure.
double RunOnce(const devcert::DevCertPaths& certs, bool batch, uint64_t bytes,
               const std::string& chunk) {
  auto server_loop = LoopThread::Start();
  auto client_loop = LoopThread::Start();
  if (!server_loop.ok() || !client_loop.ok()) return -1;
  TransportOptions transport;
  transport.batch_send = batch;
  TlsOptions server_tls;
  server_tls.cert_file = certs.server_cert;
  server_tls.key_file = certs.server_key;
  Sink sink;
  std::unique_ptr<Server> server;
  uint16_t port = 0;
  (*server_loop)->RunSync([&] {
    auto s = Server::Create((*server_loop)->loop(), "127.0.0.1", 0, server_tls,
                            transport, [&](Connection*) { return &sink; });
    if (s.ok()) {
      server = std::move(*s);
      port = server->port();
    } else {
      std::fprintf(stderr, "server: %s\n", s.status().ToString().c_str());
    }
  });
  if (server == nullptr) return -1;
  TlsOptions client_tls;
  client_tls.ca_file = certs.ca_cert;
  Source source(&chunk, bytes);
  std::unique_ptr<Client> client;
  (*client_loop)->RunSync([&] {
    auto c = Client::Connect((*client_loop)->loop(), "127.0.0.1", port,
                             client_tls, transport, &source);
    if (c.ok()) client = std::move(*c);
  });
  bool ok = client != nullptr &&
            sink.done.WaitForNotificationWithTimeout(absl::Seconds(300));
  absl::Time end = absl::Now();
  (*client_loop)->RunSync([&] { client.reset(); });
  (*server_loop)->RunSync([&] { server.reset(); });
  if (!ok || sink.bytes != bytes) return -1;
  return static_cast<double>(bytes) / (1 << 20) /
         absl::ToDoubleSeconds(end - source.start);
}

int Main() {
  const uint64_t bytes = uint64_t(absl::GetFlag(FLAGS_mib)) << 20;
  const int runs = absl::GetFlag(FLAGS_runs);
  devcert::DevCertPaths certs = testing::MakeTestCerts("quic-bench");
  const std::string chunk = testing::Pattern(kChunk, 1);
  double best[2] = {0, 0};
  for (int r = 0; r < runs; ++r) {
    for (int batch = 1; batch >= 0; --batch) {
      double mibs = RunOnce(certs, batch == 1, bytes, chunk);
      std::printf("run %d batch_send=%-5s %8.1f MiB/s\n", r,
                  batch ? "true" : "false", mibs);
      if (mibs < 0) return 1;
      best[batch] = std::max(best[batch], mibs);
    }
  }
  std::printf(
      "best of %d, %d MiB each: batch_send=true %.1f MiB/s, "
      "batch_send=false %.1f MiB/s, ratio %.2fx\n",
      runs, absl::GetFlag(FLAGS_mib), best[1], best[0], best[1] / best[0]);
  return 0;
}

}  // namespace
}  // namespace kvcast::quic

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvcast::quic::Main();
}
