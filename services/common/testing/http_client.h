// Test-only HTTP/1.1 client over a blocking loopback socket: enough to send
// raw requests and read raw responses (status line, headers, chunks) with
// bounded waits.
#ifndef KVCAST_SERVICES_COMMON_TESTING_HTTP_CLIENT_H_
#define KVCAST_SERVICES_COMMON_TESTING_HTTP_CLIENT_H_

#include <cstdint>
#include <string>

namespace kvcast::services::testing {

// A TCP connection to 127.0.0.1:port; -1 on failure.
int ConnectLoopback(uint16_t port);
// Sends all of `data`; false when the connection failed.
bool SendAll(int fd, const std::string& data);
// Reads until `want` appears in what was read (empty: until EOF), EOF, or
// 5 s pass; `eof` (if given) tells whether the peer closed.
std::string ReadUntil(int fd, const std::string& want, bool* eof = nullptr);
// "POST path" with a JSON body and Content-Length, keep-alive.
std::string PostJson(const std::string& path, const std::string& body,
                     const std::string& extra_headers = "");

}  // namespace kvcast::services::testing

#endif  // KVCAST_SERVICES_COMMON_TESTING_HTTP_CLIENT_H_
