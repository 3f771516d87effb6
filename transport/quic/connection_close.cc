// How a ConnectionImpl ends: the mapping from ngtcp2 errors, TLS failures and
// the peer's CONNECTION_CLOSE onto the Status its handler sees, and the
// closing/draining periods (RFC 9000 section 10.2).
#include <gnutls/gnutls.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/quic/close_status.h"
#include "transport/quic/connection_impl.h"

namespace kvcast::quic {
namespace {

std::string DurationText(absl::Duration d) { return absl::FormatDuration(d); }

bool IsCryptoError(uint64_t code) { return (code & ~uint64_t{0xff}) == 0x100; }

// RFC 9000 section 20.1.
std::string TransportErrorName(uint64_t code) {
  static constexpr const char* kNames[] = {
      "NO_ERROR",           "INTERNAL_ERROR",
      "CONNECTION_REFUSED", "FLOW_CONTROL_ERROR",
      "STREAM_LIMIT_ERROR", "STREAM_STATE_ERROR",
      "FINAL_SIZE_ERROR",   "FRAME_ENCODING_ERROR",
      "TRANSPORT_PARAMETER_ERROR", "CONNECTION_ID_LIMIT_ERROR",
      "PROTOCOL_VIOLATION", "INVALID_TOKEN",
      "APPLICATION_ERROR",  "CRYPTO_BUFFER_EXCEEDED",
      "KEY_UPDATE_ERROR",   "AEAD_LIMIT_REACHED",
      "NO_VIABLE_PATH"};
  std::string name = code < sizeof(kNames) / sizeof(kNames[0])
                         ? kNames[code]
                         : "unknown transport error";
  return absl::StrCat(name, " (0x", absl::Hex(code), ")");
}

}  // namespace

void ConnectionImpl::EnterState(State state) {
  state_ = state;
  if (state == State::kClosing || state == State::kDraining ||
      state == State::kDone) {
    // Nothing will be (re)transmitted any more: free the queues.
    streams_.clear();
    ready_.clear();
    drained_.clear();
    pending_resets_.clear();
    datagrams_.clear();
  }
  if (state == State::kDone) linger_until_ = UINT64_MAX;
}

void ConnectionImpl::SetPendingClose(absl::Status status, CloseAction action) {
  if (pending_close_.has_value()) return;  // The first reason wins.
  PendingClose pc;
  pc.status = std::move(status);
  pc.action = action;
  ngtcp2_ccerr_default(&pc.ccerr);
  pending_close_ = std::move(pc);
}

void ConnectionImpl::Close(uint64_t app_error, absl::string_view reason) {
  if (pending_close_.has_value() ||
      (state_ != State::kHandshake && state_ != State::kOpen)) {
    return;
  }
  SetPendingClose(ApplicationCloseStatus(app_error, reason),
                  CloseAction::kSendClose);
  pending_close_->reason = std::string(reason);
  ngtcp2_ccerr_set_application_error(&pending_close_->ccerr, app_error, nullptr, 0);
  host_->RequestFlush(this);
}

void ConnectionImpl::Refuse(absl::string_view reason) {
  if (pending_close_.has_value() || state_ != State::kHandshake) return;
  SetPendingClose(absl::UnavailableError(absl::StrCat(
                      "refused by the server's accept callback: ", reason)),
                  CloseAction::kSendClose);
  pending_close_->reason = std::string(reason);
  ngtcp2_ccerr_set_transport_error(&pending_close_->ccerr, NGTCP2_CONNECTION_REFUSED, nullptr,
                                   0);
}

void ConnectionImpl::Shutdown(absl::Status status) {
  if (state_ == State::kHandshake || state_ == State::kOpen) {
    pending_close_.reset();
    SetPendingClose(std::move(status), CloseAction::kSendClose);
    pending_close_->reason = "endpoint shut down";
    ngtcp2_ccerr_set_application_error(&pending_close_->ccerr, 0, nullptr, 0);
    ExecutePendingClose();
  } else if (pending_close_.has_value()) {
    ExecutePendingClose();
  }
  EnterState(State::kDone);
}

void ConnectionImpl::PeerUnreachable(absl::string_view why) {
  if (state_ != State::kHandshake && state_ != State::kOpen) return;
  SetPendingClose(absl::UnavailableError(absl::StrCat("peer unreachable: ", why)),
                  CloseAction::kDrop);
  host_->RequestFlush(this);
}

std::optional<absl::Status> ConnectionImpl::TakeCloseStatus() {
  std::optional<absl::Status> out = std::move(close_status_);
  close_status_.reset();
  return out;
}

absl::Duration ConnectionImpl::probe_timeout() const {
  return conn_ == nullptr ? absl::ZeroDuration()
                          : absl::Nanoseconds(int64_t(ngtcp2_conn_get_pto(conn_)));
}

absl::Duration ConnectionImpl::NegotiatedIdleTimeout() const {
  absl::Duration idle = options_.idle_timeout;
  const ngtcp2_transport_params* peer =
      conn_ == nullptr ? nullptr : ngtcp2_conn_get_remote_transport_params(conn_);
  if (peer != nullptr && peer->max_idle_timeout > 0) {
    const absl::Duration theirs = absl::Nanoseconds(int64_t(peer->max_idle_timeout));
    if (idle <= absl::ZeroDuration() || theirs < idle) idle = theirs;
  }
  return idle;
}

void ConnectionImpl::FailWithLibError(int liberr) {
  CloseAction action = CloseAction::kSendClose;
  absl::Status status;
  bool alert_close = false;
  uint8_t alert = 0;
  switch (liberr) {
    case NGTCP2_ERR_DRAINING:  // CONNECTION_CLOSE or stateless reset received.
      status = stateless_reset_
                   ? absl::UnavailableError(
                         "stateless reset from the peer: it lost the "
                         "connection state (restarted?)")
                   : PeerCloseStatus();
      action = CloseAction::kDrain;
      break;
    case NGTCP2_ERR_RECV_VERSION_NEGOTIATION:
      status = absl::UnavailableError(absl::StrCat(
          "version negotiation failed: the server speaks none of our QUIC "
          "versions (offered: ",
          absl::StrJoin(offered_versions_, ", ",
                        [](std::string* out, uint32_t v) {
                          absl::StrAppend(out, "0x", absl::Hex(v));
                        }),
          "; ours: 0x1)"));
      action = CloseAction::kDrop;
      break;
    case NGTCP2_ERR_IDLE_CLOSE:
      status = absl::DeadlineExceededError(
          absl::StrCat("idle timeout: nothing heard from the peer for ",
                       DurationText(NegotiatedIdleTimeout())));
      action = CloseAction::kDrop;
      break;
    case NGTCP2_ERR_HANDSHAKE_TIMEOUT:
      status = absl::DeadlineExceededError(
          absl::StrCat("handshake did not complete within ",
                       DurationText(options_.handshake_timeout)));
      break;
    case NGTCP2_ERR_DROP_CONN:
    case NGTCP2_ERR_CLOSING:
      status = absl::UnavailableError(
          absl::StrCat("connection dropped: ", ngtcp2_strerror(liberr)));
      action = CloseAction::kDrop;
      break;
    case NGTCP2_ERR_CRYPTO:
      status = HandshakeFailureStatus();
      alert_close = true;
      alert = ngtcp2_conn_get_tls_alert(conn_);
      break;
    case NGTCP2_ERR_CALLBACK_FAILURE:
      status = callback_status_.ok()
                   ? absl::InternalError("QUIC callback failed")
                   : callback_status_;
      if (callback_alert_.has_value()) {
        alert_close = true;
        alert = *callback_alert_;
      }
      break;
    default:
      status = absl::UnavailableError(
          absl::StrCat("QUIC protocol error: ", ngtcp2_strerror(liberr)));
      break;
  }
  SetPendingClose(std::move(status), action);
  if (action == CloseAction::kSendClose) {
    if (alert_close) {
      ngtcp2_ccerr_set_tls_alert(&pending_close_->ccerr, alert, nullptr, 0);
    } else {
      ngtcp2_ccerr_set_liberr(&pending_close_->ccerr, liberr, nullptr, 0);
    }
  }
}

void ConnectionImpl::ExecutePendingClose() {
  PendingClose pc = std::move(*pending_close_);
  pending_close_.reset();
  if (!close_reported_) {
    close_reported_ = true;
    close_status_ = pc.status;
  }
  const ngtcp2_tstamp now = NowTs();
  const ngtcp2_duration linger = 3 * ngtcp2_conn_get_pto(conn_);
  if (pc.action == CloseAction::kDrain) {
    EnterState(State::kDraining);
    linger_until_ = now + linger;
    return;
  }
  if (pc.action == CloseAction::kSendClose && !ngtcp2_conn_in_closing_period(conn_) &&
      !ngtcp2_conn_in_draining_period(conn_)) {
    pc.ccerr.reason = reinterpret_cast<uint8_t*>(pc.reason.data());
    pc.ccerr.reasonlen = pc.reason.size();
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi{};
    close_packet_.resize(NGTCP2_MAX_UDP_PAYLOAD_SIZE);
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(
        conn_, &ps.path, &pi, close_packet_.data(), close_packet_.size(),
        &pc.ccerr, now);
    if (n > 0) {
      close_packet_.resize(static_cast<size_t>(n));
      host_->SendPackets(remote_, close_packet_, close_packet_.size());
      EnterState(State::kClosing);
      linger_until_ = now + linger;
      return;
    }
    close_packet_.clear();
  }
  EnterState(State::kDone);
}

absl::Status ConnectionImpl::PeerCloseStatus() {
  const ngtcp2_ccerr& ccerr = *ngtcp2_conn_get_ccerr(conn_);
  std::string reason(reinterpret_cast<const char*>(ccerr.reason),
                     ccerr.reasonlen);
  std::string suffix = reason.empty() ? "" : absl::StrCat(": ", reason);
  switch (ccerr.type) {
    case NGTCP2_CCERR_TYPE_APPLICATION:
      return ApplicationCloseStatus(ccerr.error_code, reason);
    case NGTCP2_CCERR_TYPE_TRANSPORT:
      if (ccerr.error_code == NGTCP2_NO_ERROR) return absl::OkStatus();
      if (IsCryptoError(ccerr.error_code)) {
        uint8_t alert = static_cast<uint8_t>(ccerr.error_code & 0xff);
        std::string msg = absl::StrCat(
            "peer aborted the TLS handshake with alert ", AlertName(alert),
            alert == GNUTLS_A_CERTIFICATE_REQUIRED
                ? ": it requires a certificate from us"
                : IsCertificateAlert(alert) ? ": it rejected our certificate"
                                            : "",
            suffix);
        return IsCertificateAlert(alert) ? absl::UnauthenticatedError(msg)
                                         : absl::UnavailableError(msg);
      }
      return absl::UnavailableError(absl::StrCat(
          "peer closed the connection with transport error ",
          TransportErrorName(ccerr.error_code),
          ccerr.error_code == NGTCP2_APPLICATION_ERROR && reason.empty()
              ? ": its application closed during the handshake"
              : suffix));
    default:
      return absl::UnavailableError(
          absl::StrCat("peer closed the connection", suffix));
  }
}

absl::Status ConnectionImpl::HandshakeFailureStatus() {
  const char* peer = is_server_ ? "client" : "server";
  std::string problem = tls_ != nullptr ? tls_->CertificateProblem() : "";
  uint8_t alert = ngtcp2_conn_get_tls_alert(conn_);
  if (!problem.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "TLS handshake failed: ", peer, " certificate rejected: ", problem));
  }
  if (IsCertificateAlert(alert)) {
    return absl::UnauthenticatedError(
        absl::StrCat("TLS handshake failed: ", peer,
                     " certificate missing or not acceptable (alert ",
                     AlertName(alert), ")"));
  }
  return absl::UnavailableError(
      absl::StrCat("TLS handshake failed (alert ", AlertName(alert), ")"));
}

}  // namespace kvcast::quic
