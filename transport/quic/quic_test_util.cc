#include "transport/quic/quic_test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvcast::quic::testing {
namespace {

std::atomic<int> cert_dir_counter{0};

std::string TempBase() {
  const char* base = std::getenv("TEST_TMPDIR");
  return base != nullptr ? base : "/tmp";
}

}  // namespace

devcert::DevCertPaths MakeTestCerts(const std::string& name) {
  devcert::DevCertOptions options;
  options.out_dir = absl::StrCat(TempBase(), "/", name, "-", getpid(), "-",
                                 cert_dir_counter.fetch_add(1));
  options.names = {"localhost", "127.0.0.1", "::1"};
  options.client_name = "test-client";
  options.reuse_ca = false;
  absl::Status st = devcert::WriteDevCertificates(options);
  EXPECT_TRUE(st.ok()) << st;
  return devcert::PathsIn(options.out_dir);
}

std::string Pattern(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  std::mt19937 gen(seed);
  size_t i = 0;
  for (; i + 4 <= size; i += 4) {
    uint32_t v = gen();
    std::memcpy(&out[i], &v, 4);
  }
  for (; i < size; ++i) out[i] = static_cast<char>(gen());
  return out;
}

// ----------------------------------------------------------------------------
// RecordingHandler

void RecordingHandler::OnHandshakeDone(Connection* conn) {
  {
    absl::MutexLock lock(&mu_);
    conn_ = conn;
    handshake_done_ = true;
  }
}

void RecordingHandler::OnStreamData(Connection* conn, int64_t stream_id,
                                    absl::Span<const uint8_t> data, bool fin) {
  std::string all;
  {
    absl::MutexLock lock(&mu_);
    conn_ = conn;
    std::string& s = data_[stream_id];
    s.append(reinterpret_cast<const char*>(data.data()), data.size());
    if (fin && !fin_[stream_id]) {
      fin_[stream_id] = true;
      ++fin_count_;
    }
    if (fin && options_.echo_uni && (stream_id & 0x2) != 0) all = s;
  }
  const bool bidi = (stream_id & 0x2) == 0;
  if (options_.echo_bidi && bidi) {
    absl::Status st = conn->Send(stream_id, data, fin);
    EXPECT_TRUE(st.ok()) << st;
  }
  if (options_.echo_uni && !bidi && fin) {
    absl::StatusOr<int64_t> id = conn->OpenUniStream();
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) {
      EXPECT_TRUE(conn->Send(*id, all, true).ok());
    }
  }
  if (on_data) on_data(conn, stream_id, data, fin);
}

void RecordingHandler::OnStreamReset(Connection*, int64_t stream_id,
                                     uint64_t app_error) {
  absl::MutexLock lock(&mu_);
  resets_.emplace_back(stream_id, app_error);
}

void RecordingHandler::OnStreamDrained(Connection*, int64_t stream_id) {
  absl::MutexLock lock(&mu_);
  ++drained_[stream_id];
}

void RecordingHandler::OnDatagram(Connection* conn,
                                  absl::Span<const uint8_t> data) {
  {
    absl::MutexLock lock(&mu_);
    datagrams_.emplace_back(reinterpret_cast<const char*>(data.data()),
                            data.size());
  }
  if (options_.echo_datagrams) {
    absl::Status st = conn->SendDatagram(data);
    EXPECT_TRUE(st.ok()) << st;
  }
}

void RecordingHandler::OnStreamsAvailable(Connection* conn) {
  if (on_streams_available) on_streams_available(conn);
}

void RecordingHandler::OnClosed(Connection* conn, const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    conn_ = nullptr;
    ++closed_count_;
    if (!closed_.has_value()) closed_ = reason;
  }
  if (on_closed) on_closed(conn, reason);
}

bool RecordingHandler::Await(std::function<bool()> pred,
                             absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(+[](std::function<bool()>* p) { return (*p)(); }, &pred),
      timeout);
}

bool RecordingHandler::WaitHandshake(absl::Duration timeout) {
  return Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return handshake_done_ || closed_.has_value();
  }, timeout) && handshake_done();
}

std::optional<absl::Status> RecordingHandler::WaitClosed(
    absl::Duration timeout) {
  if (!Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return closed_.has_value();
      }, timeout)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool RecordingHandler::WaitFin(int64_t stream_id, absl::Duration timeout) {
  return Await([this, stream_id]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = fin_.find(stream_id);
    return it != fin_.end() && it->second;
  }, timeout);
}

bool RecordingHandler::WaitFinCount(size_t n, absl::Duration timeout) {
  return Await([this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return fin_count_ >= n;
  }, timeout);
}

bool RecordingHandler::WaitDatagrams(size_t n, absl::Duration timeout) {
  return Await([this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return datagrams_.size() >= n;
  }, timeout);
}

bool RecordingHandler::WaitResets(size_t n, absl::Duration timeout) {
  return Await([this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return resets_.size() >= n;
  }, timeout);
}

bool RecordingHandler::handshake_done() const {
  absl::MutexLock lock(&mu_);
  return handshake_done_;
}

int RecordingHandler::closed_count() const {
  absl::MutexLock lock(&mu_);
  return closed_count_;
}

std::string RecordingHandler::stream_data(int64_t stream_id) const {
  absl::MutexLock lock(&mu_);
  auto it = data_.find(stream_id);
  return it == data_.end() ? "" : it->second;
}

std::map<int64_t, std::string> RecordingHandler::all_streams() const {
  absl::MutexLock lock(&mu_);
  return data_;
}

std::vector<std::string> RecordingHandler::datagrams() const {
  absl::MutexLock lock(&mu_);
  return datagrams_;
}

std::vector<std::pair<int64_t, uint64_t>> RecordingHandler::resets() const {
  absl::MutexLock lock(&mu_);
  return resets_;
}

int RecordingHandler::drained_count(int64_t stream_id) const {
  absl::MutexLock lock(&mu_);
  auto it = drained_.find(stream_id);
  return it == drained_.end() ? 0 : it->second;
}

Connection* RecordingHandler::conn() const {
  absl::MutexLock lock(&mu_);
  return conn_;
}

// ----------------------------------------------------------------------------
// QuicTestEnv

QuicTestEnv::QuicTestEnv() {
  absl::StatusOr<std::unique_ptr<LoopThread>> lt = LoopThread::Start();
  EXPECT_TRUE(lt.ok()) << lt.status();
  loop_ = std::move(*lt);
  certs_ = MakeTestCerts("quic");
}

QuicTestEnv::~QuicTestEnv() {
  loop_->RunSync([this] {
    clients_.clear();
    server_.reset();
  });
  loop_.reset();
}

TlsOptions QuicTestEnv::ServerTls() const {
  TlsOptions tls;
  tls.cert_file = certs_.server_cert;
  tls.key_file = certs_.server_key;
  tls.ca_file = certs_.ca_cert;
  return tls;
}

TlsOptions QuicTestEnv::ClientTls() const {
  TlsOptions tls;
  tls.ca_file = certs_.ca_cert;
  return tls;
}

absl::Status QuicTestEnv::StartServer(const TlsOptions& tls,
                                      const TransportOptions& transport,
                                      RecordingHandler::Options handler_options,
                                      uint16_t port, const std::string& host) {
  server_handler_options_ = handler_options;
  absl::Status status;
  loop_->RunSync([&] {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(
        loop_->loop(), host, port, tls, transport,
        [this](Connection*) -> ConnectionHandler* {
          auto handler =
              std::make_unique<RecordingHandler>(server_handler_options_);
          RecordingHandler* raw = handler.get();
          absl::MutexLock lock(&mu_);
          server_handlers_.push_back(std::move(handler));
          return raw;
        });
    if (!server.ok()) {
      status = server.status();
      return;
    }
    server_ = std::move(*server);
    port_ = server_->port();
  });
  return status;
}

void QuicTestEnv::StopServer() {
  loop_->RunSync([this] { server_.reset(); });
}

RecordingHandler* QuicTestEnv::ServerHandler(size_t i, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, i]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return server_handlers_.size() > i;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return nullptr;
  return server_handlers_[i].get();
}

absl::StatusOr<size_t> QuicTestEnv::Connect(const TlsOptions& tls,
                                            const TransportOptions& transport,
                                            const std::string& host,
                                            uint16_t port) {
  auto handler = std::make_unique<RecordingHandler>();
  RecordingHandler* raw = handler.get();
  client_handlers_.push_back(std::move(handler));
  absl::StatusOr<std::unique_ptr<Client>> client;
  loop_->RunSync([&] {
    client = Client::Connect(loop_->loop(), host, port != 0 ? port : port_, tls,
                             transport, raw);
  });
  if (!client.ok()) {
    client_handlers_.pop_back();
    return client.status();
  }
  clients_.push_back(std::move(*client));
  return clients_.size() - 1;
}

void QuicTestEnv::DestroyClient(size_t i) {
  loop_->RunSync([this, i] { clients_[i].reset(); });
}

// ----------------------------------------------------------------------------
// PacketDropper

std::function<bool(absl::Span<const uint8_t>)> PacketDropper::Filter() {
  return [this](absl::Span<const uint8_t>) {
    uint64_t n = seen_.fetch_add(1) + 1;
    if (blackhole_.load() || (every_nth_ != 0 && n % every_nth_ == 0)) {
      dropped_.fetch_add(1);
      return false;
    }
    sent_.fetch_add(1);
    return true;
  };
}

}  // namespace kvcast::quic::testing
