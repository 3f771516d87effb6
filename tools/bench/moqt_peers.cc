#include "tools/bench/moqt_peers.h"

#include <stdlib.h>

#include <vector>

#include "absl/status/status.h"

namespace kvcast::bench {

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
