// Test support for the QUIC endpoint: fresh certificates per test, a loop
// thread with a server and clients, and a ConnectionHandler that records
// what happens and lets the test thread wait for it with a deadline.
//
// Thread safety: RecordingHandler callbacks run on the loop thread; its
// Wait*/accessors may be called from any thread (state under a mutex).
#ifndef KVCAST_TRANSPORT_QUIC_QUIC_TEST_UTIL_H_
#define KVCAST_TRANSPORT_QUIC_QUIC_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tools/devcert/devcert.h"
#include "transport/quic/connection.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/event_loop.h"

namespace kvcast::quic::testing {

// CA + server (localhost, 127.0.0.1, ::1) + client ("test-client") certs in
// a fresh directory under TEST_TMPDIR (or /tmp) named `name`.
devcert::DevCertPaths MakeTestCerts(const std::string& name);

// Deterministic pseudo-random bytes.
std::string Pattern(size_t size, uint32_t seed);

class RecordingHandler : public ConnectionHandler {
 public:
  struct Options {
    bool echo_bidi = false;        // Echo bidi stream data (and FIN) back.
    bool echo_uni = false;         // On FIN of a peer uni stream, send it
                                   // back on a new uni stream.
    bool echo_datagrams = false;
  };
  RecordingHandler() : RecordingHandler(Options{}) {}
  explicit RecordingHandler(Options options) : options_(options) {}

  // ConnectionHandler (loop thread).
  void OnHandshakeDone(Connection* conn) override;
  void OnStreamData(Connection* conn, int64_t stream_id,
                    absl::Span<const uint8_t> data, bool fin) override;
  void OnStreamReset(Connection* conn, int64_t stream_id,
                     uint64_t app_error) override;
  void OnStreamDrained(Connection* conn, int64_t stream_id) override;
  void OnDatagram(Connection* conn, absl::Span<const uint8_t> data) override;
  void OnStreamsAvailable(Connection* conn) override;
  void OnClosed(Connection* conn, const absl::Status& reason) override;

  // Optional hooks, run on the loop thread after recording.
  std::function<void(Connection*, int64_t, absl::Span<const uint8_t>, bool)>
      on_data;
  std::function<void(Connection*)> on_streams_available;
  std::function<void(Connection*, const absl::Status&)> on_closed;

  // Test thread: each returns false / nullopt when `timeout` passes first.
  bool WaitHandshake(absl::Duration timeout);
  std::optional<absl::Status> WaitClosed(absl::Duration timeout);
  bool WaitFin(int64_t stream_id, absl::Duration timeout);
  bool WaitFinCount(size_t n, absl::Duration timeout);
  bool WaitDatagrams(size_t n, absl::Duration timeout);
  bool WaitResets(size_t n, absl::Duration timeout);

  bool handshake_done() const;
  int closed_count() const;
  std::string stream_data(int64_t stream_id) const;
  std::map<int64_t, std::string> all_streams() const;
  std::vector<std::string> datagrams() const;
  std::vector<std::pair<int64_t, uint64_t>> resets() const;
  int drained_count(int64_t stream_id) const;
  // The connection, while open (loop thread use only).
  Connection* conn() const;

 private:
  bool Await(std::function<bool()> pred, absl::Duration timeout);

  const Options options_;
  mutable absl::Mutex mu_;
  Connection* conn_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool handshake_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
  int closed_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::string> data_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, bool> fin_ ABSL_GUARDED_BY(mu_);
  size_t fin_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> datagrams_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, uint64_t>> resets_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int> drained_ ABSL_GUARDED_BY(mu_);
};

// A loop thread, one server and any number of clients, torn down in the
// right order (endpoints on the loop, then handlers, then the loop).
class QuicTestEnv {
 public:
  QuicTestEnv();
  ~QuicTestEnv();

  LoopThread& loop() { return *loop_; }
  const devcert::DevCertPaths& certs() const { return certs_; }
  // Server TLS options with the test server certificate.
  TlsOptions ServerTls() const;
  // Client TLS options trusting the test CA.
  TlsOptions ClientTls() const;

  // Starts the server on `host` (port 0 unless given). Accepted
  // connections get a new RecordingHandler with `handler_options`.
  absl::Status StartServer(const TlsOptions& tls,
                           const TransportOptions& transport,
                           RecordingHandler::Options handler_options = {},
                           uint16_t port = 0,
                           const std::string& host = "127.0.0.1");
  void StopServer();
  uint16_t port() const { return port_; }
  Server* server() { return server_.get(); }
  // Waits for the i-th accepted connection's handler.
  RecordingHandler* ServerHandler(size_t i,
                                  absl::Duration timeout = absl::Seconds(10));

  // Connects a client (on the loop thread) with a new RecordingHandler.
  // Returns its index; the client's handler is client_handler(i).
  absl::StatusOr<size_t> Connect(const TlsOptions& tls,
                                 const TransportOptions& transport,
                                 const std::string& host = "127.0.0.1",
                                 uint16_t port = 0);
  RecordingHandler* client_handler(size_t i) { return client_handlers_[i].get(); }
  Client* client(size_t i) { return clients_[i].get(); }
  void DestroyClient(size_t i);

  // Runs `fn` on the loop thread and waits for it.
  void Run(std::function<void()> fn) { loop_->RunSync(std::move(fn)); }

 private:
  std::unique_ptr<LoopThread> loop_;
  devcert::DevCertPaths certs_;
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
  RecordingHandler::Options server_handler_options_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<RecordingHandler>> server_handlers_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RecordingHandler>> client_handlers_;
  std::vector<std::unique_ptr<Client>> clients_;
};

// Drops outgoing datagrams: every `every_nth` (0: none), or all while
// `blackhole` is set. Thread-safe counters for the test to read.
class PacketDropper {
 public:
  explicit PacketDropper(uint64_t every_nth = 0) : every_nth_(every_nth) {}
  // A filter for TransportOptions::outgoing_packet_filter.
  std::function<bool(absl::Span<const uint8_t>)> Filter();
  void set_blackhole(bool on) { blackhole_.store(on); }
  uint64_t sent() const { return sent_.load(); }
  uint64_t dropped() const { return dropped_.load(); }

 private:
  const uint64_t every_nth_;
  std::atomic<bool> blackhole_{false};
  std::atomic<uint64_t> seen_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace kvcast::quic::testing

#endif  // KVCAST_TRANSPORT_QUIC_QUIC_TEST_UTIL_H_
