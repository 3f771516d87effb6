#include "services/common/grpc_server.h"

#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "services/common/flags_util.h"
#include "services/common/internal/listen_socket.h"

namespace kvcast::services {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
  }
  return ss.str();
}

absl::Status CheckTlsFiles(const std::string& cert, const std::string& key,
                           const std::string& ca, bool server) {
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cert_file and key_file must be given together (cert_file=\"", cert,
                     "\", key_file=\"", key, "\")"));
  }
  if (server && !ca.empty() && cert.empty()) {
    return absl::InvalidArgumentError("ca_file (client verification) needs cert_file and key_file");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              std::vector<NamedService> services) {
  ASSIGN_OR_RETURN(auto host_port, ParseListen(options.listen));
  RETURN_IF_ERROR(CheckTlsFiles(options.cert_file, options.key_file, options.ca_file, true));
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  bool tls = !options.cert_file.empty();
  if (tls) {
    ASSIGN_OR_RETURN(std::string cert, ReadPem("cert_file", options.cert_file));
    ASSIGN_OR_RETURN(std::string key, ReadPem("key_file", options.key_file));
    std::string ca;
    if (!options.ca_file.empty()) {
      ASSIGN_OR_RETURN(ca, ReadPem("ca_file", options.ca_file));
    }
    grpc::SslServerCredentialsOptions ssl(
        ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = ca;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  }

  grpc::EnableDefaultHealthCheckService(true);  // Process-wide; before building.
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, creds, &port);
  std::vector<std::string> names = {""};
  for (const NamedService& s : services) {
    builder.RegisterService(s.service);
    names.push_back(s.full_name);
  }
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept MakeChannel's 2 s pings (the default policy allows one per 5 min
  // without data and answers more with GOAWAY "too_many_pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Find dead clients (streams held open by a killed scheduler).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    // gRPC only logs why; if the address cannot be bound, say so.
    auto probe = internal::ListenTcp(host_port.first, host_port.second, options.listen);
    if (!probe.ok()) return probe.status();
    close(*probe);
    return absl::UnknownError(absl::StrCat("gRPC server did not start on ", options.listen,
                                           tls ? " (are cert_file and key_file a pair?)" : "",
                                           "; see gRPC's log"));
  }
  for (const std::string& name : names) {
    server->GetHealthCheckService()->SetServingStatus(name, true);
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(server), port, tls, names));
}

GrpcServer::GrpcServer(std::unique_ptr<grpc::Server> server, int port, bool tls,
                       std::vector<std::string> names)
    : server_(std::move(server)), port_(port), tls_(tls), health_names_(std::move(names)) {}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (const std::string& name : health_names_) {
    server_->GetHealthCheckService()->SetServingStatus(name, serving);
  }
}

void GrpcServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (const std::string& name : health_names_) {
      server_->GetHealthCheckService()->SetServingStatus(name, false);
    }
  }
  // Concurrent Shutdown calls return at once; this one blocks in grpc.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& cert_file, const std::string& key_file, const std::string& ca_file) {
  if (cert_file.empty() && key_file.empty() && ca_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  RETURN_IF_ERROR(CheckTlsFiles(cert_file, key_file, ca_file, false));
  grpc::SslCredentialsOptions ssl;
  if (!ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem("ca_file", ca_file));
  }
  if (!cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem("cert_file", cert_file));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem("key_file", key_file));
  }
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           std::shared_ptr<grpc::ChannelCredentials> creds,
                                           const std::string& tls_name) {
  grpc::ChannelArguments args;
  if (!tls_name.empty()) args.SetSslTargetNameOverride(tls_name);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Generous enough for peers whose cores are busy with compute (a 2 s
  // timeout dropped live workers on a saturated 2-core host); a killed
  // process is noticed at once anyway (its sockets are reset).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 4000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 6000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // Keep pinging idle streams.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  return grpc::CreateCustomChannel(target, std::move(creds), args);
}

}  // namespace kvcast::services
