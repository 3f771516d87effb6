// The MoQT client tools' TLS flags: see client_tls_flags.h.
#include "transport/moqt/tools/client_tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, ca, "", "CA file (PEM) that verifies the relay");
ABSL_FLAG(bool, insecure, false, "do not verify the relay's certificate (development only)");
ABSL_FLAG(std::string, cert, "", "client certificate (PEM) for mutual TLS");
ABSL_FLAG(std::string, key, "", "client key (PEM) for mutual TLS");
ABSL_FLAG(std::string, server_name, "", "name to verify in the relay certificate");

namespace kvcast::moqt {

quic::TlsOptions ClientTlsFromFlags() {
  quic::TlsOptions tls;
  tls.ca_file = absl::GetFlag(FLAGS_ca);
  tls.insecure_skip_verify = absl::GetFlag(FLAGS_insecure);
  tls.cert_file = absl::GetFlag(FLAGS_cert);
  tls.key_file = absl::GetFlag(FLAGS_key);
  tls.server_name = absl::GetFlag(FLAGS_server_name);
  return tls;
}

}  // namespace kvcast::moqt
