#include "services/worker/testing/test_worker.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/testing/tiny_model_fixture.h"
#include "tools/devcert/devcert.h"

namespace kvcast::worker::testing {

absl::StatusOr<std::unique_ptr<WorkerRuntime>> StartTestWorker(v1::WorkerRole role,
                                                               const std::string& dir) {
  devcert::DevCertOptions certs;
  certs.out_dir = dir;
  RETURN_IF_ERROR(devcert::WriteDevCertificates(certs));
  const devcert::DevCertPaths paths = devcert::PathsIn(dir);
  WorkerConfig c;
  c.role = role;
  c.model_dir = TinyModelDir();
  c.model_name = "tiny";
  c.backend = "cpu-f32";
  c.kv_cache_mb = 16;
  c.grpc.listen = "127.0.0.1:0";
  c.advertise_host = "127.0.0.1";
  c.moqt_listen = "127.0.0.1:0";
  c.quic_server.cert_file = c.quic_client.cert_file = paths.server_cert;
  c.quic_server.key_file = c.quic_client.key_file = paths.server_key;
  c.quic_client.insecure_skip_verify = true;
  return WorkerRuntime::Create(c);
}

std::shared_ptr<grpc::Channel> ChannelTo(const WorkerRuntime& rt) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", rt.grpc_port()),
                             grpc::InsecureChannelCredentials());
}

double MetricOf(WorkerRuntime& rt, const std::string& name, const cluster::Labels& labels) {
  absl::StatusOr<double> v = cluster::ScrapeMetric(rt.metrics().Render(), name, labels);
  return v.ok() ? *v : -1;
}

}  // namespace kvcast::worker::testing
