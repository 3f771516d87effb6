// The request side of services/common/http_server.cc apart from sockets:
// Boost.Beast's HTTP/1.1 parser with the server's limits, the status a read
// error is answered with, and the conversion of a parsed message into an
// HttpRequest. Split out so the request path can be fuzzed without sockets
// (services/common/fuzz/http_request_fuzzer.cc).
#ifndef KVCAST_SERVICES_COMMON_INTERNAL_HTTP_PARSE_H_
#define KVCAST_SERVICES_COMMON_INTERNAL_HTTP_PARSE_H_

#include <cstddef>

#include "boost/beast/core/error.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "services/common/http_server.h"

namespace kvcast::services::internal {

// Request line + headers, at most (431 beyond).
inline constexpr size_t kMaxHeadBytes = 16 << 10;

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets `parser`'s limits: kMaxHeadBytes of head, `max_body_bytes` of body.
void ConfigureParser(RequestParser* parser, size_t max_body_bytes);

// The status a failed read is answered with: 413 (body too large), 431
// (head too large), 400 (malformed); 0 when there is nothing to answer
// (the client closed, or the socket failed).
int StatusForReadError(const boost::beast::error_code& ec);

// `msg` as an HttpRequest: header names lower-cased, repeated headers joined
// with ",", path = target up to '?'.
HttpRequest ToHttpRequest(boost::beast::http::request<boost::beast::http::string_body>&& msg);

}  // namespace kvcast::services::internal

#endif  // KVCAST_SERVICES_COMMON_INTERNAL_HTTP_PARSE_H_
