#include "transport/moqt/testing/moqt_test_util.h"

#include <gtest/gtest.h>

#include "transport/quic/quic_test_util.h"

namespace kvcast::moqt::testing {

bool WaitOnLoop(quic::LoopThread* thread, const std::function<bool()>& pred,
                absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool ok = false;
    thread->RunSync([&] { ok = pred(); });
    if (ok) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

RelayHarness::RelayHarness(RelayOptions options, SessionOptions server_options,
                           int loop_threads) {
  auto thread = quic::LoopThread::Start();
  EXPECT_TRUE(thread.ok()) << thread.status();
  thread_ = std::move(*thread);
  certs_ = quic::testing::MakeTestCerts("moqt");
  thread_->RunSync([&] {
    relay_ = std::make_unique<Relay>(loop(), options);
    quic::TlsOptions tls;
    tls.cert_file = certs_.server_cert;
    tls.key_file = certs_.server_key;
    auto server = MoqtServer::Create(loop(), "127.0.0.1", 0, tls, quic::TransportOptions{},
                                     server_options, relay_.get(), loop_threads);
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) {
      server_ = std::move(*server);
      port_ = server_->port();
    }
  });
}

RelayHarness::~RelayHarness() {
  thread_->RunSync([&] {
    clients_.clear();
    server_.reset();
    relay_.reset();
  });
  thread_.reset();
}

MoqtClient* RelayHarness::Connect(RequestHandler* handler, SessionOptions options) {
  MoqtClient* raw = nullptr;
  thread_->RunSync([&] {
    quic::TlsOptions tls;
    tls.ca_file = certs_.ca_cert;
    tls.server_name = "localhost";
    auto client = MoqtClient::Connect(loop(), "127.0.0.1", port_, tls,
                                      quic::TransportOptions{}, options, handler);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return;
    raw = client->get();
    clients_.push_back(std::move(*client));
  });
  if (raw == nullptr) return nullptr;
  EXPECT_TRUE(WaitOnLoop(thread(), [raw] { return raw->session()->ready(); }))
      << "MoQT SETUP did not complete";
  return raw;
}

void RelayHarness::Disconnect(MoqtClient* client) {
  thread_->RunSync([&] {
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      if (it->get() == client) {
        clients_.erase(it);
        return;
      }
    }
  });
}

std::string Bytes(uint64_t group, uint64_t object, size_t size) {
  return quic::testing::Pattern(size, static_cast<uint32_t>(group * 65537 + object));
}

absl::Span<const uint8_t> AsSpan(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace kvcast::moqt::testing
