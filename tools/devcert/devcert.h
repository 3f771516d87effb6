// Development certificates for kvcast's QUIC endpoints: a throw-away CA and
// leaf certificates signed by it (ECDSA P-256, SHA-256), written as PEM.
//
//   out_dir/ca.pem, ca-key.pem          the CA (kept and reused if present)
//   out_dir/server.pem, server-key.pem  serverAuth + clientAuth leaf for `names`
//                                       (a worker presents it as server and client)
//   out_dir/client.pem, client-key.pem  clientAuth leaf (when client_name)
//   out_dir/moqt-auth.key               a random MoQT authorization key (64 hex
//                                       digits; kept and reused with the CA)
//
// Not for production: keys are unencrypted (files are created mode 0600).
//
// Thread safety: WriteDevCertificates may run concurrently for different
// directories.
#ifndef KVCAST_TOOLS_DEVCERT_DEVCERT_H_
#define KVCAST_TOOLS_DEVCERT_DEVCERT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvcast::devcert {

struct DevCertOptions {
  std::string out_dir;  // Created if missing.
  // DNS names and IP addresses the server certificate is valid for (its
  // subjectAltName); the first is also its common name.
  std::vector<std::string> names = {"localhost", "127.0.0.1"};
  // When set: also a client certificate (mutual TLS) with this common name.
  std::string client_name;
  absl::Duration validity = absl::Hours(24 * 365);
  // Reuse ca.pem + ca-key.pem already in out_dir; false makes a new CA.
  bool reuse_ca = true;
};

// The files WriteDevCertificates writes in `dir`.
struct DevCertPaths {
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string moqt_auth_key;  // --moqt_auth_key_file / relay --auth_key_file
};
DevCertPaths PathsIn(const std::string& dir);

// Errors: INVALID_ARGUMENT for a missing out_dir, no names, a name that is
// neither a DNS name nor an IP address, or an unreadable existing CA;
// FAILED_PRECONDITION (with the path and errno text) when a file cannot be
// written; INTERNAL for GnuTLS failures (with GnuTLS's message).
absl::Status WriteDevCertificates(const DevCertOptions& options);

}  // namespace kvcast::devcert

#endif  // KVCAST_TOOLS_DEVCERT_DEVCERT_H_
