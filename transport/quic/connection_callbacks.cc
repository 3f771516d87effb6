// ngtcp2 callbacks of ConnectionImpl: trampolines (one line each) and the
// member functions they reach. Handler calls made from here run inside
// ngtcp2_conn_read_pkt/handle_expiry; the Connection methods a handler may
// call from them only queue work (see connection_impl.h).
#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/quic/connection_impl.h"

namespace kvcast::quic {
namespace {

ConnectionImpl* Self(void* user_data) {
  return static_cast<ConnectionImpl*>(user_data);
}

}  // namespace

ngtcp2_conn* ConnectionCallbacks::GetConn(ngtcp2_crypto_conn_ref* ref) {
  return static_cast<ConnectionImpl*>(ref->user_data)->conn_;
}

ngtcp2_callbacks ConnectionCallbacks::Make(bool is_server) {
  ngtcp2_callbacks cb{};
  if (is_server) {
    cb.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  } else {
    cb.client_initial = ngtcp2_crypto_client_initial_cb;
    cb.recv_retry = ngtcp2_crypto_recv_retry_cb;
  }
  cb.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb.encrypt = ngtcp2_crypto_encrypt_cb;
  cb.decrypt = ngtcp2_crypto_decrypt_cb;
  cb.hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb.update_key = ngtcp2_crypto_update_key_cb;
  cb.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb.version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb.rand = [](uint8_t* dest, size_t len, const ngtcp2_rand_ctx*) {
    (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
  };

  cb.handshake_completed = [](ngtcp2_conn*, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnHandshakeCompleted());
  };
  cb.handshake_confirmed = [](ngtcp2_conn*, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnHandshakeConfirmed());
  };
  cb.recv_stream_data = [](ngtcp2_conn*, uint32_t flags, int64_t id, uint64_t,
                           const uint8_t* data, size_t len, void* ud, void*) {
    return Self(ud)->ToLibError(Self(ud)->OnRecvStreamData(flags, id, data, len));
  };
  cb.acked_stream_data_offset = [](ngtcp2_conn*, int64_t id, uint64_t offset,
                                   uint64_t len, void* ud, void*) {
    return Self(ud)->ToLibError(Self(ud)->OnAckedStreamData(id, offset, len));
  };
  cb.stream_close = [](ngtcp2_conn*, uint32_t flags, int64_t id,
                       uint64_t app_error, void* ud, void*) {
    return Self(ud)->ToLibError(Self(ud)->OnStreamClose(flags, id, app_error));
  };
  cb.stream_reset = [](ngtcp2_conn*, int64_t id, uint64_t, uint64_t app_error,
                       void* ud, void*) {
    return Self(ud)->ToLibError(Self(ud)->OnStreamReset(id, app_error));
  };
  cb.extend_max_stream_data = [](ngtcp2_conn*, int64_t id, uint64_t, void* ud,
                                 void*) {
    return Self(ud)->ToLibError(Self(ud)->OnExtendMaxStreamData(id));
  };
  cb.extend_max_local_streams_bidi = [](ngtcp2_conn*, uint64_t, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnExtendMaxLocalStreams());
  };
  cb.extend_max_local_streams_uni = [](ngtcp2_conn*, uint64_t, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnExtendMaxLocalStreams());
  };
  cb.recv_datagram = [](ngtcp2_conn*, uint32_t, const uint8_t* data,
                        size_t len, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnRecvDatagram(data, len));
  };
  cb.recv_stateless_reset = [](ngtcp2_conn*, const ngtcp2_pkt_stateless_reset*,
                               void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnRecvStatelessReset());
  };
  cb.recv_version_negotiation = [](ngtcp2_conn*, const ngtcp2_pkt_hd*,
                                   const uint32_t* sv, size_t n, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnRecvVersionNegotiation(sv, n));
  };
  cb.get_new_connection_id = [](ngtcp2_conn*, ngtcp2_cid* cid, uint8_t* token,
                                size_t cidlen, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnNewConnectionId(cid, token, cidlen));
  };
  cb.remove_connection_id = [](ngtcp2_conn*, const ngtcp2_cid* cid, void* ud) {
    return Self(ud)->ToLibError(Self(ud)->OnRemoveConnectionId(cid));
  };
  return cb;
}

// The one place where a callback's Status becomes ngtcp2's error code. The
// status is kept: ngtcp2 then returns NGTCP2_ERR_CALLBACK_FAILURE to the
// caller of read_pkt/handle_expiry/write, which closes the connection with it.
int ConnectionImpl::ToLibError(absl::Status status) {
  if (status.ok()) return 0;
  if (callback_status_.ok()) callback_status_ = std::move(status);
  return NGTCP2_ERR_CALLBACK_FAILURE;
}

bool ConnectionImpl::HandlerLive() const {
  return handler_ != nullptr && !pending_close_.has_value() &&
         (state_ == State::kHandshake || state_ == State::kOpen);
}

absl::Status ConnectionImpl::OnHandshakeCompleted() {
  std::string selected = tls_->SelectedAlpn();
  if (selected != options_.alpn) {
    callback_alert_ = GNUTLS_A_NO_APPLICATION_PROTOCOL;
    return absl::UnavailableError(
        absl::StrCat("ALPN mismatch: peer selected '", selected,
                     "', this endpoint speaks '", options_.alpn, "'"));
  }
  // A client waits for HANDSHAKE_DONE: only then has the server accepted
  // its certificate (mutual TLS) and the connection is really usable.
  if (is_server_) {
    EnterState(State::kOpen);
    if (HandlerLive()) handler_->OnHandshakeDone(this);
  }
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnHandshakeConfirmed() {
  if (!is_server_) {
    EnterState(State::kOpen);
    if (HandlerLive()) handler_->OnHandshakeDone(this);
  }
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnRecvStreamData(uint32_t flags, int64_t stream_id,
                                              const uint8_t* data, size_t len) {
  if (!streams_.contains(stream_id)) {  // Opened by the peer.
    Stream& s = streams_[stream_id];
    s.can_send = ngtcp2_is_bidi_stream(stream_id);
  }
  if (HandlerLive()) {
    handler_->OnStreamData(this, stream_id, absl::MakeConstSpan(data, len),
                           (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
  }
  // The handler consumed the bytes: give the window back right away.
  ngtcp2_conn_extend_max_stream_offset(conn_, stream_id, len);
  ngtcp2_conn_extend_max_offset(conn_, len);
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnAckedStreamData(int64_t stream_id,
                                               uint64_t offset, uint64_t len) {
  auto it = streams_.find(stream_id);
  if (it != streams_.end()) it->second.send.MarkAcked(offset + len);
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnStreamClose(uint32_t flags, int64_t stream_id,
                                           uint64_t app_error) {
  auto it = streams_.find(stream_id);
  if (it != streams_.end()) {
    Stream& s = it->second;
    bool has_code = (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0;
    // A STOP_SENDING from the peer surfaces only here (ngtcp2 0.12 has no
    // callback for it).
    if (has_code && !s.local_reset && !s.reset_reported && HandlerLive()) {
      s.reset_reported = true;
      handler_->OnStreamReset(this, stream_id, app_error);
    }
    streams_.erase(stream_id);  // `it` may be stale after the handler ran.
  }
  if (!ngtcp2_conn_is_local_stream(conn_, stream_id)) {
    // Let the peer open another stream in place of this one.
    if (ngtcp2_is_bidi_stream(stream_id)) {
      ngtcp2_conn_extend_max_streams_bidi(conn_, 1);
    } else {
      ngtcp2_conn_extend_max_streams_uni(conn_, 1);
    }
  }
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnStreamReset(int64_t stream_id,
                                           uint64_t app_error) {
  auto it = streams_.find(stream_id);
  if (it != streams_.end()) {
    if (it->second.reset_reported || it->second.local_reset) {
      return absl::OkStatus();
    }
    it->second.reset_reported = true;
  }
  if (HandlerLive()) handler_->OnStreamReset(this, stream_id, app_error);
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnExtendMaxStreamData(int64_t stream_id) {
  auto it = streams_.find(stream_id);
  if (it != streams_.end() && it->second.blocked) {
    it->second.blocked = false;
    MarkReady(stream_id, it->second);
  }
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnExtendMaxLocalStreams() {
  // ngtcp2 also reports the initial limits during the handshake; only
  // raises on an open connection are news to the handler.
  if (state_ == State::kOpen && HandlerLive()) {
    handler_->OnStreamsAvailable(this);
  }
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnRecvDatagram(const uint8_t* data, size_t len) {
  if (HandlerLive()) handler_->OnDatagram(this, absl::MakeConstSpan(data, len));
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnRecvStatelessReset() {
  stateless_reset_ = true;
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnRecvVersionNegotiation(const uint32_t* versions,
                                                      size_t n) {
  offered_versions_.assign(versions, versions + n);
  return absl::OkStatus();
}

absl::Status ConnectionImpl::OnNewConnectionId(ngtcp2_cid* cid, uint8_t* token,
                                               size_t cidlen) {
  if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0) {
    return absl::InternalError("gnutls_rnd failed");
  }
  cid->datalen = cidlen;
  return host_->OnNewConnectionId(this, cid, token);
}

absl::Status ConnectionImpl::OnRemoveConnectionId(const ngtcp2_cid* cid) {
  host_->OnRetireConnectionId(this, *cid);
  return absl::OkStatus();
}

}  // namespace kvcast::quic
