// The HTTP request path apart from sockets: Beast's parser with the
// server's limits, the status each read error is answered with, and the
// conversion into an HttpRequest.
#include "services/common/internal/http_parse.h"

#include <string>

#include "boost/asio/buffer.hpp"
#include "boost/asio/error.hpp"
#include "boost/beast/http/error.hpp"
#include "gtest/gtest.h"

namespace kvcast::services::internal {
namespace {

namespace http = boost::beast::http;

// Feeds `wire` to a parser configured as the server's (body limit
// `max_body`), then, if `eof`, the end of the stream; the first error, or
// none with the message in `*out`.
boost::beast::error_code Parse(const std::string& wire, size_t max_body, HttpRequest* out,
                               bool eof = false) {
  RequestParser parser;
  ConfigureParser(&parser, max_body);
  parser.eager(true);
  boost::beast::error_code ec;
  size_t at = 0;
  while (at < wire.size() && !parser.is_done()) {
    const size_t used = parser.put(boost::asio::buffer(wire.data() + at, wire.size() - at), ec);
    if (ec == http::error::need_more) {
      ec = {};
      if (used == 0) break;
    }
    if (ec) return ec;
    at += used;
  }
  if (!parser.is_done() && eof) parser.put_eof(ec);
  if (!ec && parser.is_done() && out != nullptr) *out = ToHttpRequest(parser.release());
  return ec;
}

TEST(HttpParseTest, AMessageBecomesAnHttpRequest) {
  HttpRequest req;
  ASSERT_FALSE(Parse("POST /v1/chat/completions?stream=1 HTTP/1.1\r\n"
                     "Host: kvcast\r\nX-Tag: a\r\nContent-Type: application/json\r\n"
                     "x-tag: b\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
                     1 << 20, &req));
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.target, "/v1/chat/completions?stream=1");
  EXPECT_EQ(req.path, "/v1/chat/completions");
  EXPECT_EQ(req.body, "{\"a\":1}");
  // Names lower-cased; a repeated header (any case) joined with ",".
  EXPECT_EQ(req.headers.at("host"), "kvcast");
  EXPECT_EQ(req.headers.at("x-tag"), "a,b");
  EXPECT_EQ(req.headers.at("content-type"), "application/json");
  EXPECT_EQ(req.headers.count("Host"), 0u);

  ASSERT_FALSE(Parse("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 0, &req));
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.path, "/health");
  EXPECT_EQ(req.body, "");
}

TEST(HttpParseTest, LimitsAnswerWithTheirStatus) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  // A body one byte over the limit: 413; at the limit: served.
  HttpRequest req;
  EXPECT_FALSE(Parse(head + "Content-Length: 16\r\n\r\n" + std::string(16, 'b'), 16, &req));
  EXPECT_EQ(req.body.size(), 16u);
  boost::beast::error_code ec =
      Parse(head + "Content-Length: 17\r\n\r\n" + std::string(17, 'b'), 16, nullptr);
  EXPECT_EQ(ec, http::error::body_limit);
  EXPECT_EQ(StatusForReadError(ec), 413);
  // A head past kMaxHeadBytes: 431.
  ec = Parse(head + "X-Big: " + std::string(kMaxHeadBytes, 'h') + "\r\n\r\n", 1 << 20, nullptr);
  EXPECT_EQ(ec, http::error::header_limit);
  EXPECT_EQ(StatusForReadError(ec), 431);
  // A head just under it is read.
  EXPECT_FALSE(Parse(head + "X-Big: " + std::string(kMaxHeadBytes - 200, 'h') + "\r\n\r\n",
                     1 << 20, &req));
}

TEST(HttpParseTest, MalformedIs400AndAClosedStreamIsNotAnswered) {
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET /x HTTP/1.1\r\nNo colon here\r\n\r\n",
                          "POST /x HTTP/1.1\r\nContent-Length: nine\r\n\r\n"}) {
    boost::beast::error_code ec = Parse(bad, 1 << 20, nullptr);
    ASSERT_TRUE(ec) << bad;
    EXPECT_EQ(StatusForReadError(ec), 400) << bad << ": " << ec.message();
  }
  // The client closing before or inside a message: nobody to answer.
  EXPECT_EQ(StatusForReadError(http::error::end_of_stream), 0);
  boost::beast::error_code ec =
      Parse("POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 1 << 20, nullptr, /*eof=*/true);
  EXPECT_EQ(ec, http::error::partial_message);
  EXPECT_EQ(StatusForReadError(ec), 0);
  // Socket errors are not HTTP errors.
  EXPECT_EQ(StatusForReadError(boost::asio::error::connection_reset), 0);
  EXPECT_EQ(StatusForReadError(boost::asio::error::eof), 0);
  EXPECT_EQ(StatusForReadError({}), 0);
}

}  // namespace
}  // namespace kvcast::services::internal
