#include "tools/bench/tls_tcp_pair.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace kvcast::bench {
namespace {

void Check(int rc, const char* what) {
  if (rc < 0) {
    std::fprintf(stderr, "tls-tcp: %s: %s\n", what, gnutls_strerror(rc));
    std::exit(1);
  }
}

gnutls_session_t Handshake(int fd, bool server, gnutls_certificate_credentials_t cred) {
  gnutls_session_t s;
  Check(gnutls_init(&s, server ? GNUTLS_SERVER : GNUTLS_CLIENT), "gnutls_init");
  Check(gnutls_priority_set_direct(s, "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM",
                                   nullptr),
        "priority");
  Check(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred), "credentials");
  if (!server) {
    gnutls_server_name_set(s, GNUTLS_NAME_DNS, "localhost", 9);
    gnutls_session_set_verify_cert(s, "localhost", 0);
  }
  gnutls_transport_set_int(s, fd);
  int rc;
  do rc = gnutls_handshake(s);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  Check(rc, "handshake");
  return s;
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + t.tv_nsec * 1e-9;
}

}  // namespace

void TlsSendAll(gnutls_session_t session, const uint8_t* data, size_t n) {
  for (size_t sent = 0; sent < n;) {
    const ssize_t r = gnutls_record_send(session, data + sent, n - sent);
    if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) continue;
    Check(int(std::min<ssize_t>(r, 0)), "send");
    sent += size_t(r);
  }
}

void TlsReceiveExactly(gnutls_session_t session, uint8_t* data, size_t n) {
  for (size_t got = 0; got < n;) {
    const ssize_t r = gnutls_record_recv(session, data + got, n - got);
    if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) continue;
    Check(int(std::min<ssize_t>(r, 0)), "recv");
    if (r == 0) {
      std::fprintf(stderr, "tls-tcp: the sender closed after %zu of %zu bytes\n", got, n);
      std::exit(1);
    }
    got += size_t(r);
  }
}

TlsTcpRun OverTlsTcp(const devcert::DevCertPaths& certs, const TlsEnd& send,
                     const TlsEnd& receive) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tls-tcp: listen");
    std::exit(1);
  }
  gnutls_certificate_credentials_t server_cred, client_cred;
  gnutls_certificate_allocate_credentials(&server_cred);
  gnutls_certificate_allocate_credentials(&client_cred);
  Check(gnutls_certificate_set_x509_key_file(server_cred, certs.server_cert.c_str(),
                                             certs.server_key.c_str(), GNUTLS_X509_FMT_PEM),
        "server key");
  Check(gnutls_certificate_set_x509_trust_file(client_cred, certs.ca_cert.c_str(),
                                               GNUTLS_X509_FMT_PEM),
        "trust file");
  absl::Notification server_ready;
  absl::Time start, end;
  TlsTcpRun run;
  std::thread server([&] {
    pthread_setname_np(pthread_self(), "tls-recv");
    const int fd = accept(listener, nullptr, nullptr);
    gnutls_session_t s = Handshake(fd, true, server_cred);
    server_ready.Notify();
    const double cpu0 = ThreadCpuSeconds();
    receive(s);
    end = absl::Now();
    run.receive_cpu_seconds = ThreadCpuSeconds() - cpu0;
    gnutls_bye(s, GNUTLS_SHUT_WR);
    gnutls_deinit(s);
    close(fd);
  });
  std::thread client([&] {
    pthread_setname_np(pthread_self(), "tls-send");
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      std::perror("tls-tcp: connect");
      std::exit(1);
    }
    gnutls_session_t s = Handshake(fd, false, client_cred);
    server_ready.WaitForNotification();
    start = absl::Now();
    const double cpu0 = ThreadCpuSeconds();
    send(s);
    run.send_cpu_seconds = ThreadCpuSeconds() - cpu0;
    // The receiver's bye, or its close, ends the connection.
    uint8_t sink[256];
    while (gnutls_record_recv(s, sink, sizeof(sink)) > 0) {
    }
    gnutls_deinit(s);
    close(fd);
  });
  server.join();
  client.join();
  close(listener);
  gnutls_certificate_free_credentials(server_cred);
  gnutls_certificate_free_credentials(client_cred);
  run.seconds = absl::ToDoubleSeconds(end - start);
  return run;
}

}  // namespace kvcast::bench
