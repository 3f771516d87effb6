// MoQT peers the KV benchmarks share: a KV publisher that announces its
// prompts to a relay it connected to, a handler that notes its session is
// ready, and development certificates for loopback QUIC.
#ifndef KVCAST_TOOLS_BENCH_MOQT_PEERS_H_
#define KVCAST_TOOLS_BENCH_MOQT_PEERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "tools/devcert/devcert.h"
#include "transport/kvcache/publisher.h"
#include "transport/moqt/moqt_endpoint.h"

namespace kvcast::bench {

// A prefill side: serves its own port (when given one) and announces to the
// relay it reaches through `upstream` once that session is ready.
class UpstreamPublisher : public kvcache::KvPublisher {
 public:
  using KvPublisher::KvPublisher;
  void OnSessionReady(moqt::MoqtSession* session) override {
    if (upstream == nullptr || session != upstream->session()) return;
    SetUpstream(session);
    ready.Notify();
  }
  std::unique_ptr<moqt::MoqtClient> upstream;
  absl::Notification ready;
};

// Serves every track it is asked for as `objects` objects of one hot buffer
// of `object_bytes` (128 a group), by reference and with KvPublisher's
// 8 MiB send window: the MoQT side of a byte-transport comparison (no
// codec; the TLS baseline also sends from a hot buffer). Loop thread only.
class BytePublisher : public moqt::RequestHandler {
 public:
  void SetTrack(size_t object_bytes, uint64_t objects);
  void OnSubscribe(moqt::MoqtSession* session, const moqt::Subscribe& request,
                   std::shared_ptr<moqt::Downstream> downstream) override;

 private:
  struct Outlet {
    std::shared_ptr<moqt::Downstream> downstream;
    uint64_t next = 0;
  };
  void Pump(const std::shared_ptr<Outlet>& o);

  std::shared_ptr<const std::vector<uint8_t>> buffer_;
  uint64_t objects_ = 0;
};

class Ready : public moqt::RequestHandler {
 public:
  void OnSessionReady(moqt::MoqtSession*) override { ready.Notify(); }
  absl::Notification ready;
};

// Development certificates for 127.0.0.1 / localhost in a new directory
// `prefix`.XXXXXX (the caller removes it), and the TLS options a loopback
// server and client use with them.
struct LoopbackCerts {
  std::string dir;
  devcert::DevCertPaths paths;
  quic::TlsOptions Server() const;
  quic::TlsOptions Client() const;
};
absl::StatusOr<LoopbackCerts> MakeLoopbackCerts(const std::string& prefix);

}  // namespace kvcast::bench

#endif  // KVCAST_TOOLS_BENCH_MOQT_PEERS_H_
