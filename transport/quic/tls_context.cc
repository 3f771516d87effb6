#include "transport/quic/tls_context.h"

#include <arpa/inet.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvcast::quic {
namespace {

// TLS 1.3 only (QUIC requires it); no middlebox compatibility mode, which
// QUIC forbids.
constexpr char kPriority[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE";

bool IsIpLiteral(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

absl::Status CheckReadable(const std::string& what, const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file not set"));
  }
  if (access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " file ", path));
  }
  return absl::OkStatus();
}

absl::Status GnutlsError(const std::string& what, int rv) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", gnutls_strerror(rv)));
}

}  // namespace

std::string TlsSession::SelectedAlpn() const {
  gnutls_datum_t proto;
  if (gnutls_alpn_get_selected_protocol(session_, &proto) != 0) return "";
  return std::string(reinterpret_cast<const char*>(proto.data), proto.size);
}

std::string TlsSession::CertificateProblem() const {
  unsigned status = gnutls_session_get_verify_cert_status(session_);
  if (status == 0 || status == static_cast<unsigned>(-1)) return "";
  gnutls_datum_t out{};
  if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509,
                                                   &out, 0) < 0) {
    return absl::StrCat("verification status 0x", absl::Hex(status));
  }
  std::string text(reinterpret_cast<const char*>(out.data), out.size);
  gnutls_free(out.data);
  absl::StripTrailingAsciiWhitespace(&text);
  return text;
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(
    Role role, const TlsOptions& tls, const std::string& alpn) {
  if (alpn.empty() || alpn.size() > 255) {
    return absl::InvalidArgumentError("ALPN must be 1..255 bytes");
  }
  std::unique_ptr<TlsContext> ctx(new TlsContext(role, tls, alpn));
  int rv = gnutls_certificate_allocate_credentials(&ctx->cred_);
  if (rv != 0) return GnutlsError("gnutls credentials", rv);

  const bool want_own_cert = role == Role::kServer || !tls.cert_file.empty() ||
                             !tls.key_file.empty();
  if (want_own_cert) {
    const char* who = role == Role::kServer ? "server" : "client";
    if (absl::Status st = CheckReadable(absl::StrCat(who, " certificate"),
                                        tls.cert_file);
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            CheckReadable(absl::StrCat(who, " private key"), tls.key_file);
        !st.ok()) {
      return st;
    }
    rv = gnutls_certificate_set_x509_key_file(ctx->cred_, tls.cert_file.c_str(),
                                              tls.key_file.c_str(),
                                              GNUTLS_X509_FMT_PEM);
    if (rv < 0) {
      return GnutlsError(absl::StrCat("cannot load certificate ", tls.cert_file,
                                      " with key ", tls.key_file),
                         rv);
    }
  }

  const bool verify_peer = role == Role::kServer ? tls.require_client_cert
                                                 : !tls.insecure_skip_verify;
  if (role == Role::kServer && tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "require_client_cert needs ca_file (the CA that signs client certs)");
  }
  if (verify_peer) {
    if (!tls.ca_file.empty()) {
      if (absl::Status st = CheckReadable("CA", tls.ca_file); !st.ok()) {
        return st;
      }
      rv = gnutls_certificate_set_x509_trust_file(
          ctx->cred_, tls.ca_file.c_str(), GNUTLS_X509_FMT_PEM);
      if (rv < 0) {
        return GnutlsError(absl::StrCat("cannot load CA file ", tls.ca_file),
                           rv);
      }
      if (rv == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("no certificate in CA file ", tls.ca_file));
      }
    } else {
      rv = gnutls_certificate_set_x509_system_trust(ctx->cred_);
      if (rv < 0) return GnutlsError("cannot load system CA store", rv);
    }
  }
  return ctx;
}

TlsContext::~TlsContext() {
  if (cred_ != nullptr) gnutls_certificate_free_credentials(cred_);
}

absl::StatusOr<std::unique_ptr<TlsSession>> TlsContext::NewSession(
    ngtcp2_crypto_conn_ref* conn_ref, const std::string& peer_name) const {
  const bool server = role_ == Role::kServer;
  gnutls_session_t raw = nullptr;
  unsigned flags = server ? GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET
                          : GNUTLS_CLIENT;
  int rv = gnutls_init(&raw, flags | GNUTLS_NO_END_OF_EARLY_DATA);
  if (rv != 0) return absl::InternalError(gnutls_strerror(rv));
  auto session = std::make_unique<TlsSession>(raw);

  rv = gnutls_priority_set_direct(raw, kPriority, nullptr);
  if (rv != 0) return absl::InternalError(gnutls_strerror(rv));
  rv = server ? ngtcp2_crypto_gnutls_configure_server_session(raw)
              : ngtcp2_crypto_gnutls_configure_client_session(raw);
  if (rv != 0) return absl::InternalError("ngtcp2 GnuTLS session setup failed");
  gnutls_session_set_ptr(raw, conn_ref);
  rv = gnutls_credentials_set(raw, GNUTLS_CRD_CERTIFICATE, cred_);
  if (rv != 0) return absl::InternalError(gnutls_strerror(rv));

  gnutls_datum_t alpn{
      reinterpret_cast<unsigned char*>(const_cast<char*>(alpn_.data())),
      static_cast<unsigned>(alpn_.size())};
  // Mandatory: a server aborts with no_application_protocol when the client
  // offers nothing it speaks; the client checks the selection itself once
  // the handshake completes.
  rv = gnutls_alpn_set_protocols(raw, &alpn, 1, GNUTLS_ALPN_MANDATORY);
  if (rv != 0) return absl::InternalError(gnutls_strerror(rv));

  if (server) {
    if (options_.require_client_cert) {
      gnutls_certificate_server_set_request(raw, GNUTLS_CERT_REQUIRE);
      gnutls_session_set_verify_cert(raw, nullptr, 0);
    }
  } else {
    const std::string& name =
        options_.server_name.empty() ? peer_name : options_.server_name;
    if (!options_.insecure_skip_verify) {
      // GnuTLS matches an IP literal against IP address SANs.
      gnutls_session_set_verify_cert(raw, name.c_str(), 0);
    }
    if (!name.empty() && !IsIpLiteral(name)) {  // RFC 6066: no IPs in SNI.
      rv = gnutls_server_name_set(raw, GNUTLS_NAME_DNS, name.data(),
                                  name.size());
      if (rv != 0) return absl::InternalError(gnutls_strerror(rv));
    }
  }
  return session;
}

bool IsCertificateAlert(uint8_t alert) {
  switch (alert) {
    case GNUTLS_A_BAD_CERTIFICATE:
    case GNUTLS_A_UNSUPPORTED_CERTIFICATE:
    case GNUTLS_A_CERTIFICATE_REVOKED:
    case GNUTLS_A_CERTIFICATE_EXPIRED:
    case GNUTLS_A_CERTIFICATE_UNKNOWN:
    case GNUTLS_A_UNKNOWN_CA:
    case GNUTLS_A_ACCESS_DENIED:
    case GNUTLS_A_CERTIFICATE_REQUIRED:
      return true;
    default:
      return false;
  }
}

std::string AlertName(uint8_t alert) {
  // "GNUTLS_A_UNKNOWN_CA" -> "unknown_ca", the RFC 8446 spelling.
  const char* raw =
      gnutls_alert_get_strname(static_cast<gnutls_alert_description_t>(alert));
  std::string name = raw != nullptr ? raw : "unknown_alert";
  if (absl::StartsWith(name, "GNUTLS_A_")) name = name.substr(9);
  return absl::StrCat(absl::AsciiStrToLower(name), " (", alert, ")");
}

}  // namespace kvcast::quic
