// Test fixture pieces for MoQT over real loopback QUIC: a loop thread,
// development certificates, a relay server, clients, and bounded waits.
#ifndef KVCAST_TRANSPORT_MOQT_TESTING_MOQT_TEST_UTIL_H_
#define KVCAST_TRANSPORT_MOQT_TESTING_MOQT_TEST_UTIL_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "tools/devcert/devcert.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "transport/quic/event_loop.h"

namespace kvcast::moqt::testing {

// Polls `pred` on the loop thread every few ms until true or `timeout`.
bool WaitOnLoop(quic::LoopThread* thread, const std::function<bool()>& pred,
                absl::Duration timeout = absl::Seconds(10));

// Collects whole objects; thread-safe readers via the loop (read in RunSync).
class CollectingConsumer : public TrackConsumer {
 public:
  void OnObject(const ObjectHeader& h, absl::Span<const uint8_t> payload) override {
    if (h.status != ObjectStatus::kNormal) return;
    objects[{h.group, h.object}] =
        std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
  }
  void OnDone(const absl::Status& status) override {
    done = true;
    done_status = status;
  }
  std::map<std::pair<uint64_t, uint64_t>, std::string> objects;
  bool done = false;
  absl::Status done_status;
};

// A RequestHandler that records readiness and closure.
class ClientHandler : public RequestHandler {
 public:
  void OnSessionReady(MoqtSession*) override { ready = true; }
  void OnSessionClosed(MoqtSession*, const absl::Status& reason) override {
    closed = true;
    close_reason = reason;
  }
  bool ready = false;
  bool closed = false;
  absl::Status close_reason;
};

// A relay server on 127.0.0.1 plus helpers to connect clients to it. All
// objects are created and destroyed on the loop thread. `loop_threads`: the
// relay server's (MoqtServer::Create): with more than one, connections run
// on other loops too and reach the relay through bridges.
class RelayHarness {
 public:
  explicit RelayHarness(RelayOptions options = {}, SessionOptions server_options = {},
                        int loop_threads = 1);
  ~RelayHarness();
  quic::LoopThread* thread() { return thread_.get(); }
  quic::EventLoop* loop() { return thread_->loop(); }
  Relay* relay() { return relay_.get(); }
  uint16_t port() const { return port_; }
  MoqtServer* server() { return server_.get(); }
  const devcert::DevCertPaths& certs() const { return certs_; }
  // Connects a client whose peer requests go to `handler` (borrowed; must
  // outlive the harness) and waits until its SETUP exchange is done.
  MoqtClient* Connect(RequestHandler* handler, SessionOptions options = {});
  void Disconnect(MoqtClient* client);

 private:
  std::unique_ptr<quic::LoopThread> thread_;
  devcert::DevCertPaths certs_;
  std::unique_ptr<Relay> relay_;
  std::unique_ptr<MoqtServer> server_;
  std::vector<std::unique_ptr<MoqtClient>> clients_;
  uint16_t port_ = 0;
};

// The test payload of object `object` of group `group`.
std::string Bytes(uint64_t group, uint64_t object, size_t size);
absl::Span<const uint8_t> AsSpan(const std::string& s);

}  // namespace kvcast::moqt::testing

#endif  // KVCAST_TRANSPORT_MOQT_TESTING_MOQT_TEST_UTIL_H_
