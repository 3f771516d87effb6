// libFuzzer target for the HTTP request path of services/common/http_server
// (internal/http_parse.h): the bytes a client sends on one connection, fed
// to Beast's parser with the server's limits in fuzzer-chosen pieces, as the
// server reads them; every complete request becomes an HttpRequest (then
// the next, pipelined, request is parsed from the rest); a failed read
// maps to a status the server can answer.
//
// Input: byte 0 picks the piece size (0: all at once, else 1..255 bytes);
// the rest is the stream.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "boost/asio/buffer.hpp"
#include "services/common/internal/http_parse.h"

namespace {

constexpr size_t kMaxBody = 4096;  // small, so that 413 is reachable

#define CHECK(cond) \
  do {              \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void Check(const kvcast::services::HttpRequest& req) {
  CHECK(!req.method.empty());
  CHECK(req.target.compare(0, req.path.size(), req.path) == 0);
  CHECK(req.path.find('?') == std::string::npos);
  CHECK(req.body.size() <= kMaxBody);
  for (const auto& [name, value] : req.headers) {
    for (char c : name) CHECK(!(c >= 'A' && c <= 'Z'));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace internal = kvcast::services::internal;
  if (size == 0) return 0;
  const size_t piece = data[0] == 0 ? size : data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string pending;  // bytes read but not taken by the parser yet
  std::optional<internal::RequestParser> parser;
  parser.emplace();
  internal::ConfigureParser(&*parser, kMaxBody);
  for (int requests = 0; requests < 64;) {
    const size_t n = std::min(piece, rest.size());
    pending.append(rest.substr(0, n));
    rest.remove_prefix(n);
    boost::beast::error_code ec;
    // Give the parser what is pending until it needs more or is done.
    while (!pending.empty() && !parser->is_done()) {
      size_t used = parser->put(boost::asio::buffer(pending.data(), pending.size()), ec);
      pending.erase(0, used);
      if (ec == boost::beast::http::error::need_more) {
        ec = {};
        break;
      }
      if (ec) break;
    }
    if (!ec && !parser->is_done() && rest.empty()) {
      // No more bytes come: the client closed. Between requests that ends
      // the connection (the server's read reports end_of_stream); inside
      // one, Beast decides whether what came is a whole message.
      if (!parser->got_some() && pending.empty()) return 0;
      parser->put_eof(ec);
      if (!ec && !parser->is_done()) return 0;
    }
    if (ec) {
      const int status = internal::StatusForReadError(ec);
      CHECK(status == 0 || status == 400 || status == 413 || status == 431);
      return 0;
    }
    if (parser->is_done()) {
      Check(internal::ToHttpRequest(parser->release()));
      ++requests;
      parser.emplace();
      internal::ConfigureParser(&*parser, kMaxBody);
      continue;
    }
  }
  return 0;
}
