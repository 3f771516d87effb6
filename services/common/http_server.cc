#include "services/common/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "common/status_macros.h"
#include "services/common/flags_util.h"
#include "services/common/internal/http_parse.h"
#include "services/common/internal/listen_socket.h"

namespace kvcast::services {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

using internal::kMaxHeadBytes;

std::string Head(int status, int version, const std::string& content_type, bool keep_alive,
                 const HttpHeaders& headers) {
  std::string h = absl::StrCat(version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ", status, " ",
                               HttpReason(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&h, "Content-Type: ", content_type, "\r\n");
  absl::StrAppend(&h, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&h, name, ": ", value, "\r\n");
  return h;
}

}  // namespace

std::string HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

const char* HttpReason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

// State every connection shares with the server; connections hold it (and
// so the io_context their sockets belong to) until they are destroyed.
struct HttpShared {
  net::io_context ioc;
  std::optional<net::ssl::context> tls;  // set: every connection is TLS
  HttpServer::Options options;
  HttpServer::Handler handler;
  std::atomic<int> open{0};
  std::atomic<bool> stopped{false};  // the io_context runs no more handlers
  absl::Mutex mu;
  std::vector<std::weak_ptr<class HttpConnection>> connections ABSL_GUARDED_BY(mu);
  explicit HttpShared(int threads) : ioc(threads) {}
};

// One TCP connection. Every member function runs on `strand_`.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(std::shared_ptr<HttpShared> shared, tcp::socket socket)
      : shared_(std::move(shared)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()) {
    if (shared_->tls) tls_.emplace(socket_, *shared_->tls);
    ++shared_->open;
  }
  ~HttpConnection() { --shared_->open; }

  void Start(bool reject) {
    if (tls_ && !handshake_done_) {
      timer_.expires_after(absl::ToChronoMilliseconds(shared_->options.idle_timeout));
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec && !self->handshake_done_) self->Close();
      });
      tls_->async_handshake(net::ssl::stream_base::server,
                            [self = shared_from_this(), reject](beast::error_code ec) {
                              self->timer_.cancel();
                              if (ec || self->closed_) return self->Close();
                              self->handshake_done_ = true;
                              self->Start(reject);
                            });
      return;
    }
    if (reject) {
      const std::string body = "{\"error\":{\"message\":\"too many open connections\"}}";
      phase_ = Phase::kFinishing;
      keep_alive_ = false;
      Enqueue(Head(503, 11, "application/json", false, {{"Retry-After", "1"}}) +
              absl::StrCat("Content-Length: ", body.size(), "\r\n\r\n", body));
      return;
    }
    DoRead();
  }

  net::any_io_executor executor() { return socket_.get_executor(); }
  bool stopped() const { return shared_->stopped.load(); }
  bool closed() const { return closed_flag_.load(); }

  // Exchange calls (posted to the strand); `seq` is the request's number.
  void Respond(uint64_t seq, int status, const std::string& content_type, std::string body,
               const HttpHeaders& headers) {
    if (seq != seq_ || phase_ != Phase::kHandling || closed_) return;
    phase_ = Phase::kFinishing;
    Enqueue(Head(status, version_, content_type, keep_alive_, headers) +
            absl::StrCat("Content-Length: ", body.size(), "\r\n\r\n") + body);
  }
  void StartStream(uint64_t seq, int status, const std::string& content_type,
                   const HttpHeaders& headers) {
    if (seq != seq_ || phase_ != Phase::kHandling || closed_) return;
    phase_ = Phase::kStreaming;
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
    HttpHeaders h = headers;
    h.emplace_back("Cache-Control", "no-cache");
    if (chunked_) h.emplace_back("Transfer-Encoding", "chunked");
    Enqueue(Head(status, version_, content_type, keep_alive_, h) + "\r\n");
  }
  void Send(uint64_t seq, std::string data) {
    if (seq != seq_ || phase_ != Phase::kStreaming || closed_ || data.empty()) return;
    if (chunked_) {
      char size[24];
      std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
      data.insert(0, size);
      data += "\r\n";
    }
    Enqueue(std::move(data));
  }
  void Finish(uint64_t seq) {
    if (seq != seq_ || phase_ != Phase::kStreaming || closed_) return;
    phase_ = Phase::kFinishing;
    Enqueue(chunked_ ? "0\r\n\r\n" : "");
  }
  void SetOnClose(uint64_t seq, std::function<void()> fn) {
    if (closed_) {
      if (fn) fn();
    } else if (seq == seq_ && phase_ != Phase::kReading) {
      on_close_ = std::move(fn);
    }
  }
  void Unanswered(uint64_t seq) {
    Respond(seq, 500, "application/json",
            "{\"error\":{\"message\":\"the request was not answered\",\"type\":\"internal_error\"}}",
            {});
  }

  // Closes the socket; a request being answered has its OnClose run.
  void Close() {
    if (closed_) return;
    closed_ = true;
    closed_flag_ = true;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
    if (auto fn = std::move(on_close_)) fn();
    on_close_ = nullptr;
  }

 private:
  enum class Phase { kReading, kHandling, kStreaming, kFinishing };

  void DoRead() {
    phase_ = Phase::kReading;
    on_close_ = nullptr;
    parser_.emplace();
    internal::ConfigureParser(&*parser_, shared_->options.max_body_bytes);
    timer_.expires_after(absl::ToChronoMilliseconds(shared_->options.idle_timeout));
    timer_.async_wait([self = shared_from_this(), seq = seq_](beast::error_code ec) {
      if (!ec && self->seq_ == seq && self->phase_ == Phase::kReading) self->Close();
    });
    WithStream([&](auto& stream) {
      http::async_read(stream, buffer_, *parser_,
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->OnRead(ec);
                       });
    });
  }

  void OnRead(beast::error_code ec) {
    timer_.cancel();
    if (closed_) return;
    if (ec) {
      const int status = internal::StatusForReadError(ec);
      if (status == 0) return Close();  // the client closed or the socket failed
      ++seq_;
      phase_ = Phase::kHandling;
      keep_alive_ = false;
      version_ = 11;
      return Respond(seq_, status, "application/json",
                     absl::StrCat("{\"error\":{\"message\":\"", HttpReason(status), ": ",
                                  ec.message(), "\",\"type\":\"invalid_request_error\"}}"),
                     {});
    }
    auto msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    version_ = int(msg.version());
    HttpRequest req = internal::ToHttpRequest(std::move(msg));
    ++seq_;
    phase_ = Phase::kHandling;
    StartWatch();
    shared_->handler(std::move(req), MakeExchange());
  }

  // While a request is answered, a read notices the client leaving (EOF or
  // reset); bytes that arrive (a pipelined request) are kept for later.
  void StartWatch() {
    if (watching_ || closed_ || buffer_.size() > kMaxHeadBytes) return;
    watching_ = true;
    WithStream([&](auto& stream) {
      stream.async_read_some(buffer_.prepare(4096),
                             [self = shared_from_this()](beast::error_code ec, size_t n) {
                               self->OnWatch(ec, n);
                             });
    });
  }
  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (!ec) {
      buffer_.commit(n);
      if (phase_ == Phase::kReading) return DoRead();
      return StartWatch();
    }
    if (ec == net::error::operation_aborted && phase_ == Phase::kReading) return DoRead();
    Close();
  }

  void Enqueue(std::string data) {
    if (closed_) return;
    pending_bytes_ += data.size();
    if (pending_bytes_ > shared_->options.max_pending_write_bytes) return Close();
    if (!data.empty()) queue_.push_back(std::move(data));
    if (!writing_) DoWrite();
  }
  void DoWrite() {
    if (queue_.empty()) return Written();
    writing_ = true;
    in_flight_.clear();
    std::swap(in_flight_, queue_);
    std::vector<net::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const std::string& s : in_flight_) buffers.emplace_back(net::buffer(s));
    WithStream([&](auto& stream) {
      net::async_write(stream, buffers,
                       [self = shared_from_this()](beast::error_code ec, size_t n) {
                         self->writing_ = false;
                         self->pending_bytes_ -= n;
                         if (ec) return self->Close();
                         self->DoWrite();
                       });
    });
  }
  // Everything enqueued is written.
  void Written() {
    if (phase_ != Phase::kFinishing || closed_) return;
    on_close_ = nullptr;
    if (!keep_alive_) return Close();
    phase_ = Phase::kReading;
    if (watching_) {
      beast::error_code ec;
      socket_.cancel(ec);  // OnWatch (aborted) starts the next read
    } else {
      DoRead();
    }
  }

  std::shared_ptr<HttpExchange> MakeExchange();

  // Runs `f` on the connection's byte stream: TLS over the socket, or the
  // socket itself.
  template <class F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  const std::shared_ptr<HttpShared> shared_;
  tcp::socket socket_;
  std::optional<net::ssl::stream<tcp::socket&>> tls_;
  bool handshake_done_ = false;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Phase phase_ = Phase::kReading;
  uint64_t seq_ = 0;
  int version_ = 11;
  bool keep_alive_ = true;
  bool chunked_ = false;
  bool watching_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};
  size_t pending_bytes_ = 0;
  std::deque<std::string> queue_, in_flight_;
  std::function<void()> on_close_;
};

namespace {

class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<HttpConnection> conn, uint64_t seq)
      : conn_(std::move(conn)), seq_(seq) {}
  ~Exchange() override {
    if (!answered_) Post([](HttpConnection* c, uint64_t seq) { c->Unanswered(seq); });
  }
  void Respond(int status, const std::string& content_type, std::string body,
               const HttpHeaders& headers) override {
    answered_ = true;
    Post([=, body = std::move(body)](HttpConnection* c, uint64_t seq) mutable {
      c->Respond(seq, status, content_type, std::move(body), headers);
    });
  }
  void StartStream(int status, const std::string& content_type,
                   const HttpHeaders& headers) override {
    answered_ = true;
    Post([=](HttpConnection* c, uint64_t seq) { c->StartStream(seq, status, content_type, headers); });
  }
  void Send(std::string data) override {
    Post([data = std::move(data)](HttpConnection* c, uint64_t seq) mutable {
      c->Send(seq, std::move(data));
    });
  }
  void Finish() override {
    Post([](HttpConnection* c, uint64_t seq) { c->Finish(seq); });
  }
  void OnClose(std::function<void()> on_close) override {
    Post([fn = std::move(on_close)](HttpConnection* c, uint64_t seq) mutable {
      c->SetOnClose(seq, std::move(fn));
    });
  }
  bool closed() const override { return conn_->closed(); }

 private:
  template <typename F>
  void Post(F f) {
    if (conn_->stopped()) return;
    net::post(conn_->executor(), [c = conn_, seq = seq_, f = std::move(f)]() mutable {
      f(c.get(), seq);
    });
  }
  const std::shared_ptr<HttpConnection> conn_;
  const uint64_t seq_;
  std::atomic<bool> answered_{false};
};

}  // namespace

std::shared_ptr<HttpExchange> HttpConnection::MakeExchange() {
  return std::make_shared<Exchange>(shared_from_this(), seq_);
}

class HttpServer::Impl {
 public:
  Impl(std::shared_ptr<HttpShared> shared, uint16_t port)
      : shared_(std::move(shared)), acceptor_(shared_->ioc), port_(port) {}
  absl::Status Init(int fd, bool v6) {
    beast::error_code ec;
    acceptor_.assign(v6 ? tcp::v6() : tcp::v4(), fd, ec);
    if (ec) return absl::InternalError(absl::StrCat("http accept socket: ", ec.message()));
    return absl::OkStatus();
  }
  void Run() {
    Accept();
    for (int i = 0; i < shared_->options.io_threads; ++i) {
      threads_.emplace_back([this] { shared_->ioc.run(); });
    }
  }
  ~Impl() {
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    std::vector<std::shared_ptr<HttpConnection>> live;
    {
      absl::MutexLock l(&shared_->mu);
      for (auto& w : shared_->connections) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
      shared_->connections.clear();
    }
    for (auto& c : live) net::post(c->executor(), [c] { c->Close(); });
    live.clear();
    // Give closed connections' handlers a moment to drain, then stop.
    for (int i = 0; i < 200 && shared_->open.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    work_.reset();
    shared_->stopped = true;
    shared_->ioc.stop();
    for (auto& t : threads_) t.join();
  }
  uint16_t port() const { return port_; }
  int open() const { return shared_->open.load(); }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(shared_->ioc), [this](beast::error_code ec,
                                                                  tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        const bool reject = shared_->open.load() >= shared_->options.max_connections;
        auto conn = std::make_shared<HttpConnection>(shared_, std::move(socket));
        {
          absl::MutexLock l(&shared_->mu);
          auto& v = shared_->connections;
          if (v.size() > 64 && v.size() > 2 * size_t(shared_->open.load())) {
            v.erase(std::remove_if(v.begin(), v.end(), [](auto& w) { return w.expired(); }),
                    v.end());
          }
          v.push_back(conn);
        }
        net::post(conn->executor(), [conn, reject] { conn->Start(reject); });
      } else {
        // EMFILE and the like: back off instead of spinning.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      Accept();
    });
  }

  const std::shared_ptr<HttpShared> shared_;
  tcp::acceptor acceptor_;
  const uint16_t port_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_{
      shared_->ioc.get_executor()};
  std::vector<std::thread> threads_;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              Handler handler) {
  if (options.io_threads < 1 || options.max_connections < 1) {
    return absl::InvalidArgumentError("http server: io_threads and max_connections must be >= 1");
  }
  ASSIGN_OR_RETURN(auto host_port, ParseListen(options.listen));
  ASSIGN_OR_RETURN(int fd, internal::ListenTcp(host_port.first, host_port.second, options.listen));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto shared = std::make_shared<HttpShared>(options.io_threads);
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      close(fd);
      return absl::InvalidArgumentError("http server: TLS needs both a certificate and a key");
    }
    shared->tls.emplace(net::ssl::context::tls_server);
    net::ssl::context& ctx = *shared->tls;
    ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                    net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                    net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
    beast::error_code ec;
    ctx.use_certificate_chain_file(options.tls_cert_file, ec);
    if (!ec) ctx.use_private_key_file(options.tls_key_file, net::ssl::context::pem, ec);
    if (ec) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat("http server: TLS certificate ",
                                                     options.tls_cert_file, " / key ",
                                                     options.tls_key_file, ": ", ec.message()));
    }
  }
  shared->options = options;
  shared->handler = std::move(handler);
  auto impl = std::make_unique<Impl>(shared, internal::LocalPort(fd));
  if (absl::Status s = impl->Init(fd, addr.ss_family == AF_INET6); !s.ok()) {
    close(fd);
    return s;
  }
  impl->Run();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
uint16_t HttpServer::port() const { return impl_->port(); }
int HttpServer::open_connections() const { return impl_->open(); }

}  // namespace kvcast::services
