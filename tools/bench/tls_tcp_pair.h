// The benchmarks' TLS-over-TCP baseline: one TLS 1.3 connection over
// loopback TCP (GnuTLS, AES-128-GCM, the cipher QUIC negotiates here), whose
// two ends run caller code on threads of their own, named "tls-send" and
// "tls-recv" so that per-thread CPU accounting (thread_cpu.h) can tell them
// apart. Any failure ends the process with a message (benchmark tools only).
#ifndef KVCAST_TOOLS_BENCH_TLS_TCP_PAIR_H_
#define KVCAST_TOOLS_BENCH_TLS_TCP_PAIR_H_

#include <gnutls/gnutls.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tools/devcert/devcert.h"

namespace kvcast::bench {

using TlsEnd = std::function<void(gnutls_session_t)>;

// Wall seconds from the start of `send` to the return of `receive`, and the
// CPU seconds each end's thread spent in them (the handshake excluded).
struct TlsTcpRun {
  double seconds = 0;
  double send_cpu_seconds = 0, receive_cpu_seconds = 0;
};
// Connects, completes the handshake, then runs `send` on the client's
// thread and `receive` on the server's. Needs gnutls_global_init.
TlsTcpRun OverTlsTcp(const devcert::DevCertPaths& certs, const TlsEnd& send,
                     const TlsEnd& receive);

// Writes all `n` bytes as records.
void TlsSendAll(gnutls_session_t session, const uint8_t* data, size_t n);
// Reads exactly `n` bytes (records may split or join writes).
void TlsReceiveExactly(gnutls_session_t session, uint8_t* data, size_t n);

}  // namespace kvcast::bench

#endif  // KVCAST_TOOLS_BENCH_TLS_TCP_PAIR_H_
