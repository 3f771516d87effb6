// WorkerRuntime: what a prefill and a decode worker share.
//
//  - the Engine (model, page pool, prefix cache) and its compute thread,
//    started after a calibration run of the model (engine/calibration.h),
//    which runs Engine::Step() while there is work and hands each
//    SequenceEvent to the callback its request was submitted with;
//  - the MoQT side on one event-loop thread: a MoqtServer on --moqt_listen
//    and, with --relay, a client session to the relay (reconnected when it
//    drops), both served by the role's RequestHandler;
//  - registration with every scheduler replica (--scheduler,
//    scheduler_links.h): Register with a snapshot of the chunk hashes the
//    prefix cache holds, then a Heartbeat every lease/3 carrying the load
//    and the KV events (stored / evicted) since the last one; any failure
//    re-registers with a fresh snapshot;
//  - the gRPC server (role services + grpc.health.v1) and the /metrics
//    endpoint.
//
// Threads: gRPC handler threads call Submit/Cancel/Post; the compute thread
// runs the engine; the loop thread owns every MoQT object; the registry
// threads talk to the scheduler replicas.
#ifndef KVCAST_SERVICES_WORKER_WORKER_RUNTIME_H_
#define KVCAST_SERVICES_WORKER_WORKER_RUNTIME_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/calibration.h"
#include "engine/engine.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "services/common/grpc_server.h"
#include "services/common/metrics.h"
#include "services/common/metrics_server.h"
#include "services/worker/scheduler_links.h"
#include "transport/kvcache/ac_codec_thread.h"
#include "transport/kvcache/ac/ac_tuning.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl_pages.h"
#include "transport/moqt/authorization.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/quic/event_loop.h"

namespace kvcast::worker {

struct WorkerConfig {
  v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED;
  std::string model_dir;
  std::string model_name;  // empty: the model directory's base name
  std::string backend = "cpu";
  int device = 0;                  // GPU index for the cuda backend
  int kv_cache_mb = 256;
  double kv_cache_fraction = 0;    // > 0: this share of free backend memory instead
  int max_batch_tokens = 256;
  int chunk_tokens = 128;
  bool prefix_caching = true;
  bool kv_fp16_values = true;  // --kv_cache_precision fp16 (EngineOptions::kv_fp16_values)
  int kv_host_tier_mb = 0;                        // tier 1: evicted chunks in host memory
  KvFormat kv_host_tier_format = KvFormat::kFp16;  // their track
  HostKvTier::Policy kv_host_tier_policy = HostKvTier::Policy::kLru;
  std::string kv_disk_tier_dir;                   // tier 2: chunk files, kept across restarts
  int kv_disk_tier_mb = 0;
  // Prompts (one per line, tokenized as a completion prompt) computed at
  // start whose full chunks stay in the page pool, never evicted.
  std::string kv_pin_prompts;
  // --ac_tuning: the model's per-layer ac levels (docs/kv-quality.md), for
  // the ac tracks this worker publishes; checked against the model at load.
  std::optional<kvcache::ac::AcLayerTuning> ac_tuning;
  // --kv_basis: the model's cross-layer KV basis, for the xl tracks this
  // worker publishes and lands; checked against the model at load.
  std::shared_ptr<const kvcache::xl::KvBasis> kv_basis;
  services::GrpcServerOptions grpc;
  std::string metrics_listen;
  std::string scheduler;       // HOST:PORT[,...] (scheduler_links.h); empty: do not register
  std::string advertise_host;  // how the scheduler and peers reach us
  std::string moqt_listen;     // HOST:PORT (UDP)
  std::string relay;           // HOST:PORT; empty: peers connect directly
  quic::TlsOptions quic_server;  // --quic_cert/--quic_key (+ --quic_ca: require client certs)
  quic::TlsOptions quic_client;  // --quic_ca to verify peers (insecure when empty)
  size_t quic_max_udp_payload = 0;  // --quic_max_udp_payload (quic::TransportOptions)
  std::string grpc_client_cert, grpc_client_key, grpc_client_ca;  // to call the scheduler
  // --moqt_auth_key_file: the MoQT port accepts only requests with a valid
  // token (transport/moqt/authorization.h) and this worker signs its own
  // PUBLISH_NAMESPACE tokens. Null only with --insecure.
  std::shared_ptr<moqt::HmacTokenAuthority> moqt_auth;
  absl::Duration heartbeat = absl::Seconds(1);
};

// Reads the flags shared by kvcast-prefill and kvcast-decode (worker_flags.cc).
absl::StatusOr<WorkerConfig> WorkerConfigFromFlags(v1::WorkerRole role,
                                                   const std::string& default_grpc_listen);

class WorkerRuntime {
 public:
  using EventCallback = std::function<void(const SequenceEvent&)>;

  // Loads the model and starts the compute and loop threads.
  static absl::StatusOr<std::unique_ptr<WorkerRuntime>> Create(const WorkerConfig& config);
  ~WorkerRuntime();

  // Starts MoQT endpoints, the gRPC server with `services`, metrics and
  // registration. `handler` serves MoQT requests (borrowed).
  absl::Status Serve(moqt::RequestHandler* handler, std::vector<services::NamedService> services);
  // Graceful stop: deregister, stop taking requests, drain for `grace`,
  // close the MoQT sessions. Call it before destroying the MoQT handler
  // given to Serve. Idempotent.
  void Shutdown(absl::Duration grace);
  // After Shutdown, and after the services that keep pages (a prefill's
  // publisher and retained prompts) are destroyed: stops the compute thread,
  // ends what the engine still runs, gives back every unpinned page the
  // prefix cache holds and checks that every page but the pinned ones is
  // free. Logs "drained: all N KV pages free", or returns Internal naming
  // the pages still held (a leak).
  absl::Status CheckPagesReleased();

  // Any thread. `on_event` runs on the compute thread for each event of the
  // request, the last one with a finish reason.
  absl::StatusOr<uint64_t> Submit(std::vector<int32_t> prompt, const GenerationParams& params,
                                  PrefilledKv kv, EventCallback on_event);
  void Cancel(uint64_t id);

  Engine& engine() { return *engine_; }
  const WorkerConfig& config() const { return config_; }
  quic::EventLoop* loop() { return loop_thread_->loop(); }
  void RunSync(std::function<void()> fn) { loop_thread_->RunSync(std::move(fn)); }
  // Loop thread: the session to reach a publisher at `address`: the relay
  // while its session is up, else a direct session to `address`, created
  // on first use.
  absl::StatusOr<moqt::MoqtSession*> SessionFor(const std::string& address);
  // Loop thread: the relay session, or null.
  moqt::MoqtSession* relay_session() const;
  // Loop thread: where the ac groups landing here decode (LandingSpec.ac_thread).
  kvcache::AcCodecThread* ac_thread() const { return ac_thread_.get(); }
  // Loop thread: the xl tracks' codec for the landings here
  // (LandingSpec.xl); null without --kv_basis.
  kvcache::XlPageCodec* xl_codec() const { return xl_codec_.get(); }

  // A prompt this worker published (prefill): every scheduler replica
  // learns it with the next heartbeat.
  void ReportPublished(const std::string& prompt_digest, absl::Span<const Hash128> chain) {
    links_.Published(prompt_digest, chain);
  }

  services::MetricsRegistry& metrics() { return metrics_; }
  const std::string& model_name() const { return model_name_; }
  // Layers the model has run so far (any thread): a liveness signal of the
  // compute that advances within a long pass (Transformer::layers_run).
  uint64_t progress() const { return engine_->model().layers_run(); }
  // The start-up calibration of the loaded model (reported at registration).
  const Calibration& calibration() const { return calibration_; }
  // --moqt_auth_key_file's keys, or null.
  const std::shared_ptr<moqt::HmacTokenAuthority>& moqt_auth() const { return config_.moqt_auth; }
  std::string moqt_address() const;
  uint16_t grpc_port() const { return grpc_ ? grpc_->port() : 0; }
  uint16_t metrics_port() const { return metrics_server_ ? metrics_server_->port() : 0; }
  uint16_t moqt_port() const { return moqt_port_; }

 private:
  explicit WorkerRuntime(const WorkerConfig& config);
  void ComputeLoop();
  void StopCompute();
  // --kv_pin_prompts: computes and pins them (compute thread running).
  absl::Status PinPrompts();
  v1::WorkerLoad Load() const;
  v1::WorkerInfo Info() const;
  // Loop thread: (re)connects to the relay (every 250 ms while it is down)
  // and reports its health.
  void WatchRelay();
  // The engine's gauges and counters (pages, prefix cache, tiers, queue,
  // work done; vLLM's names too) on /metrics.
  void ExportEngineMetrics();
  quic::TransportOptions PeerTransport() const;

  const WorkerConfig config_;
  std::string worker_id_;
  std::string model_name_;
  std::unique_ptr<Engine> engine_;
  Calibration calibration_;
  services::MetricsRegistry metrics_;
  std::unique_ptr<quic::LoopThread> loop_thread_;
  std::unique_ptr<kvcache::AcCodecThread> ac_thread_;   // loop thread (until Shutdown)
  std::unique_ptr<kvcache::XlPageCodec> xl_codec_;      // loop thread
  moqt::RequestHandler* handler_ = nullptr;
  std::unique_ptr<moqt::MoqtServer> moqt_server_;        // loop thread
  std::unique_ptr<moqt::MoqtClient> relay_client_;       // loop thread
  absl::flat_hash_map<std::string, std::unique_ptr<moqt::MoqtClient>> direct_;  // loop thread
  std::pair<std::string, uint16_t> relay_;
  bool loop_stopping_ = false;                            // loop thread
  std::atomic<bool> relay_up_{false};                     // for /metrics
  uint16_t moqt_port_ = 0;
  std::unique_ptr<services::GrpcServer> grpc_;
  std::unique_ptr<services::MetricsServer> metrics_server_;

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, EventCallback> callbacks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread compute_;

  // Registration and KV events, with every scheduler replica.
  SchedulerLinks links_;
};

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_WORKER_RUNTIME_H_
