// TlsContext: the GnuTLS side of one endpoint. Loads certificates once
// (server cert+key, client CA bundle, optional client certificate for mutual
// TLS) and makes a TLS 1.3 session per QUIC connection, configured for
// ngtcp2 (QUIC transport parameters extension, secrets, ALPN, peer
// verification).
//
// Thread safety: a TlsContext is immutable after Create() and may be shared;
// each session belongs to one connection and its loop thread.
#ifndef KVCAST_TRANSPORT_QUIC_TLS_CONTEXT_H_
#define KVCAST_TRANSPORT_QUIC_TLS_CONTEXT_H_

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/quic/endpoint.h"

namespace kvcast::quic {

// Owns one gnutls_session_t.
class TlsSession {
 public:
  explicit TlsSession(gnutls_session_t session) : session_(session) {}
  ~TlsSession() { gnutls_deinit(session_); }
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  gnutls_session_t native() const { return session_; }
  // The ALPN the peer agreed to, or "" if none.
  std::string SelectedAlpn() const;
  // Why the peer's certificate was rejected ("" if it was not): GnuTLS's
  // description of the verification status bits, e.g. "The certificate is
  // NOT trusted. The certificate issuer is unknown."
  std::string CertificateProblem() const;

 private:
  gnutls_session_t session_;
};

class TlsContext {
 public:
  enum class Role { kClient, kServer };

  // Errors: INVALID_ARGUMENT naming the file and GnuTLS's reason when a
  // certificate, key or CA file is missing or unreadable, or when the
  // options are inconsistent (server without cert/key, client certificate
  // required without a CA).
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(
      Role role, const TlsOptions& tls, const std::string& alpn);
  ~TlsContext();

  // A session for one connection. `conn_ref` must outlive the session (the
  // ngtcp2 crypto helpers find the connection through it). `peer_name`
  // (client only) is checked against the server certificate (DNS name or IP
  // address) and sent as SNI when it is a DNS name.
  absl::StatusOr<std::unique_ptr<TlsSession>> NewSession(
      ngtcp2_crypto_conn_ref* conn_ref, const std::string& peer_name) const;

 private:
  TlsContext(Role role, const TlsOptions& tls, const std::string& alpn)
      : role_(role), options_(tls), alpn_(alpn) {}

  const Role role_;
  const TlsOptions options_;
  const std::string alpn_;
  gnutls_certificate_credentials_t cred_ = nullptr;
};

// True for TLS alerts that mean "your certificate is not acceptable" (bad,
// unsupported, revoked, expired, unknown certificate, unknown CA, access
// denied, certificate required): callers report those as UNAUTHENTICATED.
bool IsCertificateAlert(uint8_t alert);
// "unknown_ca (48)".
std::string AlertName(uint8_t alert);

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_TLS_CONTEXT_H_
