// An asynchronous HTTP/1.1 server for APIs that stream (Server-Sent Events):
// the scheduler's OpenAI-compatible endpoint.
//
//   HttpServer::Options o;
//   o.listen = "0.0.0.0:8000";
//   ASSIGN_OR_RETURN(auto server, HttpServer::Start(o, [](HttpRequest req,
//                                                        std::shared_ptr<HttpExchange> ex) {
//     ex->StartStream(200, "text/event-stream");
//     ex->Send("data: hello\n\n");
//     ex->Finish();
//   }));
//
// Boost.Beast (Debian's header-only libboost1.74-dev) parses requests;
// Boost.Asio runs `io_threads` threads over every connection, each
// connection on its own strand, so thousands of open streams cost memory,
// not threads (docs/openai-api.md says why this and not a thread per
// connection). Keep-alive and HTTP/1.0 are honoured; a request body larger
// than `max_body_bytes` is answered 413, a head larger than 16 KiB 431, a
// malformed request 400 (then the connection closes). A connection idle for
// `idle_timeout` between requests is closed. TCP_NODELAY is set on every
// connection (small event-stream writes must not wait for delayed ACKs).
// Beyond `max_connections` open connections, new ones get 503 and close.
// With `tls_cert_file` and `tls_key_file` every connection is TLS (1.2 or
// 1.3, OpenSSL through Asio; a handshake that does not finish within
// `idle_timeout` closes the connection); without them, plaintext (behind a
// gateway that terminates TLS).
//
// The handler runs on an I/O thread and must not block: it answers through
// the HttpExchange at once or later from any thread.
//
// Thread safety: HttpServer's methods may be called from any thread;
// HttpExchange's methods too (they are serialized on the connection's strand).
#ifndef KVCAST_SERVICES_COMMON_HTTP_SERVER_H_
#define KVCAST_SERVICES_COMMON_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvcast::services {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target without the query: "/v1/models"
  absl::flat_hash_map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  // The header's value, "" when absent. `name` must be lower case.
  std::string Header(const std::string& name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request's answer: either Respond once, or StartStream, any number of
// Send, and Finish. Calls out of that order are ignored. A handler that drops
// its last reference without answering gets a 500 sent for it.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // A whole response (Content-Length set).
  virtual void Respond(int status, const std::string& content_type, std::string body,
                       const HttpHeaders& headers = {}) = 0;
  // Starts a chunked response; Send appends a chunk; Finish ends it.
  virtual void StartStream(int status, const std::string& content_type,
                           const HttpHeaders& headers = {}) = 0;
  virtual void Send(std::string data) = 0;
  virtual void Finish() = 0;
  // `on_close` runs once, on an I/O thread, if the client goes away (or the
  // server stops, or the client stops reading and more than
  // Options::max_pending_write_bytes wait) before the answer was written. Set
  // it before starting long work; it may run at once if the client is
  // already gone.
  virtual void OnClose(std::function<void()> on_close) = 0;
  // Whether the client went away.
  virtual bool closed() const = 0;
};

class HttpServer {
 public:
  using Handler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

  struct Options {
    std::string listen;  // "HOST:PORT" (flags_util ParseListen); port 0: any free port
    int io_threads = 2;
    int max_connections = 10000;
    size_t max_body_bytes = 8 << 20;
    size_t max_pending_write_bytes = 4 << 20;  // per connection, then it is dropped
    absl::Duration idle_timeout = absl::Seconds(75);  // between requests (and for the head)
    std::string tls_cert_file;  // PEM chain; with tls_key_file: HTTPS
    std::string tls_key_file;   // PEM private key
  };

  // Binds and starts serving. Errors: INVALID_ARGUMENT for a malformed
  // address, or a TLS certificate or key that cannot be loaded (named);
  // the errno's code with "bind HOST:PORT: <strerror>".
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           Handler handler);
  // Stops accepting, closes every connection (streams' OnClose run), joins
  // the I/O threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  int open_connections() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of a status code ("Not Found"), "Unknown" for others.
const char* HttpReason(int status);

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_HTTP_SERVER_H_
