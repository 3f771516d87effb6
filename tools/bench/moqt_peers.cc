#include "tools/bench/moqt_peers.h"

#include <stdlib.h>

#include <vector>

#include "absl/status/status.h"

namespace kvcast::bench {

void BytePublisher::SetTrack(size_t object_bytes, uint64_t objects) {
  buffer_ = std::make_shared<const std::vector<uint8_t>>(object_bytes, uint8_t{0x5a});
  objects_ = objects;
}

void BytePublisher::OnSubscribe(moqt::MoqtSession*, const moqt::Subscribe&,
                                std::shared_ptr<moqt::Downstream> downstream) {
  downstream->Accept(moqt::TrackInfo{});
  Pump(std::make_shared<Outlet>(Outlet{std::move(downstream)}));
}

void BytePublisher::Pump(const std::shared_ptr<Outlet>& o) {
  constexpr size_t kWindow = 8 << 20;
  moqt::Downstream& d = *o->downstream;
  const quic::SharedBytes payload{buffer_, {buffer_->data(), buffer_->size()}};
  for (; o->next < objects_; ++o->next) {
    if (d.cancelled()) return;
    if (d.queued_bytes() >= kWindow) {  // the callback holds `o` until it runs
      d.WhenQueuedBelow(kWindow / 2, [this, o] { Pump(o); });
      return;
    }
    moqt::ObjectHeader h;
    h.group = o->next / 128;
    h.object = o->next % 128;
    d.OnSharedObject(h, payload);
  }
  d.OnDone(absl::OkStatus());
}

quic::TlsOptions LoopbackCerts::Server() const {
  quic::TlsOptions tls;
  tls.cert_file = paths.server_cert;
  tls.key_file = paths.server_key;
  return tls;
}

quic::TlsOptions LoopbackCerts::Client() const {
  quic::TlsOptions tls;
  tls.ca_file = paths.ca_cert;
  tls.server_name = "localhost";
  return tls;
}

absl::StatusOr<LoopbackCerts> MakeLoopbackCerts(const std::string& prefix) {
  std::string templ = prefix + ".XXXXXX";
  std::vector<char> dir(templ.begin(), templ.end());
  dir.push_back('\0');
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError("mkdtemp " + templ + " failed");
  }
  devcert::DevCertOptions options;
  options.out_dir = dir.data();
  options.names = {"localhost", "127.0.0.1"};
  options.reuse_ca = false;
  if (absl::Status st = devcert::WriteDevCertificates(options); !st.ok()) return st;
  return LoopbackCerts{dir.data(), devcert::PathsIn(dir.data())};
}

}  // namespace kvcast::bench
