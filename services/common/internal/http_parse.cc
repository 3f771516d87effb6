// See http_parse.h.
#include "services/common/internal/http_parse.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/beast/http/error.hpp"

namespace kvcast::services::internal {

namespace http = boost::beast::http;

void ConfigureParser(RequestParser* parser, size_t max_body_bytes) {
  parser->header_limit(kMaxHeadBytes);
  parser->body_limit(max_body_bytes);
}

int StatusForReadError(const boost::beast::error_code& ec) {
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::header_limit) return 431;
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return 400;
  }
  return 0;
}

HttpRequest ToHttpRequest(http::request<http::string_body>&& msg) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& field : msg) {
    std::string name = absl::AsciiStrToLower(absl::string_view(field.name_string().data(),
                                                               field.name_string().size()));
    std::string value(field.value());
    auto [it, fresh] = req.headers.try_emplace(std::move(name), value);
    if (!fresh) absl::StrAppend(&it->second, ",", value);
  }
  req.body = std::move(msg.body());
  return req;
}

}  // namespace kvcast::services::internal
