// Command-line flags of kvcast-prefill and kvcast-decode (docs/services.md;
// the Helm chart passes exactly these, docs/deploy.md).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "services/common/log.h"
#include "services/worker/worker_runtime.h"
#include "transport/kvcache/naming.h"

ABSL_FLAG(std::string, model, "", "model: a .gguf file or an HF directory (config.json, *.safetensors, tokenizer)");
ABSL_FLAG(std::string, model_name, "", "name clients use for the model (default: directory name)");
ABSL_FLAG(std::string, backend, "cpu", "compute backend: cpu (Q8 weights), cpu-bf16, cpu-f32 (float32 weights) or cuda (where the build has it)");
ABSL_FLAG(int, device, 0, "GPU index for --backend=cuda");
ABSL_FLAG(int, kv_cache_mb, 256, "KV page pool size in MiB");
ABSL_FLAG(double, kv_cache_fraction, 0,
          "KV page pool as this share (0, 0.95] of the backend's free memory after the weights "
          "are loaded; overrides --kv_cache_mb");
ABSL_FLAG(int, max_batch_tokens, 256, "tokens per forward pass");
ABSL_FLAG(int, chunk_tokens, 128, "prefix-cache and transfer chunk (a multiple of 16)");
ABSL_FLAG(std::string, kv_basis, "",
          "the model's cross-layer KV basis (kv_quality --fit_kv_basis): this worker then "
          "publishes and lands the xl / xl-lo tracks (docs/kvcache-wire-format.md)");
ABSL_FLAG(std::string, ac_tuning, "",
          "the model's per-layer ac levels (kv_quality --calibrate_ac) for the ac tracks this "
          "worker publishes; empty: the tracks' own levels");
ABSL_FLAG(std::string, grpc_listen, "", "gRPC HOST:PORT (worker API + grpc.health.v1)");
ABSL_FLAG(std::string, grpc_cert, "", "gRPC server certificate (PEM); TLS when set");
ABSL_FLAG(std::string, grpc_key, "", "gRPC server key (PEM)");
ABSL_FLAG(std::string, grpc_ca, "", "CA (PEM): require client certificates on gRPC, and verify "
          "the scheduler with it");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9090", "HTTP HOST:PORT of /metrics; empty: off");
ABSL_FLAG(std::string, scheduler, "",
          "scheduler HOST:PORT[,HOST:PORT...] to register with: every address a HOST resolves "
          "to is a replica (re-resolved every 5 s); empty: do not register");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1", "host the scheduler and peers reach us at");
ABSL_FLAG(std::string, moqt_listen, "0.0.0.0:4433", "MoQT/QUIC HOST:PORT (UDP)");
ABSL_FLAG(std::string, relay, "", "MoQT relay HOST:PORT; empty: peers connect directly");
ABSL_FLAG(int32_t, quic_max_udp_payload, 0,
          "largest QUIC datagram sent, bytes (0: by path: 16376 to a peer on this host, path MTU "
          "discovery up to the route's MTU on jumbo-frame routes, else 1452 and discovery; set: "
          "up to 16384 from the first packet, for paths that carry them, e.g. 8952 on a "
          "jumbo-frame network): fewer packets, less CPU per KV byte");
ABSL_FLAG(std::string, quic_cert, "", "QUIC certificate (PEM), also the client certificate");
ABSL_FLAG(std::string, quic_key, "", "QUIC key (PEM)");
ABSL_FLAG(std::string, quic_ca, "",
          "CA (PEM) that verifies QUIC peers (relays, other workers, and the clients of this "
          "worker's MoQT port, which must present a certificate); required unless --insecure");
ABSL_FLAG(bool, insecure, false,
          "development only: QUIC peers are not verified, any client may connect, and MoQT "
          "requests need no AUTHORIZATION TOKEN");
ABSL_FLAG(std::string, moqt_auth_key_file, "",
          "MoQT authorization keys (one per line, >= 32 bytes; the first signs): the MoQT port "
          "serves only requests whose token the scheduler signed with them; required unless "
          "--insecure (`kvcast-devcert` writes one)");
ABSL_FLAG(bool, prefix_caching, true, "cache and reuse prompt chunks (false: for A/B runs)");
ABSL_FLAG(std::string, kv_cache_precision, "fp16",
          "fp16: KV values are stored rounded to fp16, exactly what the fp16 track and host tier "
          "carry, so a greedy request gives the same tokens whichever worker computed, sent or "
          "cached its prefix; fp32: float32 KV (as HF's float32 reference)");
ABSL_FLAG(int, kv_host_tier_mb, 0,
          "host KV tier: chunks the page pool evicts are kept in this much host memory and "
          "brought back when a prompt reuses them (0: off)");
ABSL_FLAG(std::string, kv_host_tier_policy, "lru",
          "which chunk the host tier gives up first: lru (least recently used) or lfu (least "
          "frequently used, ties by recency: keeps popular prefixes through scans)");
ABSL_FLAG(std::string, kv_disk_tier_dir, "",
          "disk KV tier: chunks the host tier pushes out are written here (one file each, "
          "checked on read) and found again after a restart (needs --kv_host_tier_mb)");
ABSL_FLAG(int, kv_disk_tier_mb, 0, "disk KV tier budget in MiB (0: off)");
ABSL_FLAG(std::string, kv_pin_prompts, "",
          "file of prompts, one per line (e.g. system prompts), computed at start; their full "
          "chunks stay in the page pool, never evicted");
ABSL_FLAG(std::string, kv_host_tier_track, "fp16",
          "the host tier's format: fp16, bf16, int8, fp8-e4m3, int4 or fp4-e2m1 (fewer bytes, "
          "more chunks, less exact)");
ABSL_FLAG(double, heartbeat_s, 1.0, "heartbeat period (at most a third of the lease)");
ABSL_FLAG(std::string, log_level, "info",
          "log lines at this level and above: trace, debug, info, warn, error, critical, off");

namespace kvcast::worker {

namespace {

// The model, backend, KV cache and its tiers.
absl::Status EngineFromFlags(WorkerConfig* config) {
  WorkerConfig& c = *config;
  c.model_dir = absl::GetFlag(FLAGS_model);
  if (c.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  c.model_name = absl::GetFlag(FLAGS_model_name);
  c.backend = absl::GetFlag(FLAGS_backend);
  if (c.backend != "cpu" && c.backend != "cpu-bf16" && c.backend != "cpu-f32" &&
      c.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", c.backend, ": expected cpu, cpu-bf16, cpu-f32 or cuda"));
  }
  c.device = absl::GetFlag(FLAGS_device);
  if (c.device < 0) return absl::InvalidArgumentError("--device must be >= 0");
  c.kv_cache_mb = absl::GetFlag(FLAGS_kv_cache_mb);
  if (c.kv_cache_mb <= 0) return absl::InvalidArgumentError("--kv_cache_mb must be positive");
  c.kv_cache_fraction = absl::GetFlag(FLAGS_kv_cache_fraction);
  if (c.kv_cache_fraction < 0 || c.kv_cache_fraction > 0.95) {
    return absl::InvalidArgumentError(absl::StrCat("--kv_cache_fraction=", c.kv_cache_fraction,
                                                   ": expected a value in [0, 0.95]"));
  }
  c.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  c.chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  c.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  if (const std::string path = absl::GetFlag(FLAGS_ac_tuning); !path.empty()) {
    auto tuning = kvcache::ac::ReadAcTuning(path);
    if (!tuning.ok()) {
      return absl::Status(tuning.status().code(),
                          absl::StrCat("--ac_tuning: ", tuning.status().message()));
    }
    c.ac_tuning = *std::move(tuning);
  }
  if (const std::string path = absl::GetFlag(FLAGS_kv_basis); !path.empty()) {
    auto basis = kvcache::xl::KvBasis::Load(path);
    if (!basis.ok()) {
      return absl::Status(basis.status().code(),
                          absl::StrCat("--kv_basis: ", basis.status().message()));
    }
    c.kv_basis = std::make_shared<const kvcache::xl::KvBasis>(*std::move(basis));
  }
  const std::string precision = absl::GetFlag(FLAGS_kv_cache_precision);
  if (precision != "fp16" && precision != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_cache_precision: '", precision, "' is not fp16 or fp32"));
  }
  c.kv_fp16_values = precision == "fp16";
  c.kv_host_tier_mb = absl::GetFlag(FLAGS_kv_host_tier_mb);
  if (c.kv_host_tier_mb < 0) return absl::InvalidArgumentError("--kv_host_tier_mb must be >= 0");
  absl::StatusOr<kvcache::KvCompression> tier_track =
      kvcache::CompressionOfTrackName(absl::GetFlag(FLAGS_kv_host_tier_track));
  if (!tier_track.ok() || !tier_track->fixed_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_host_tier_track: '", absl::GetFlag(FLAGS_kv_host_tier_track),
                     "' is not one of fp16, bf16, int8, fp8-e4m3, int4, fp4-e2m1"));
  }
  c.kv_host_tier_format = tier_track->format;
  const std::string policy = absl::GetFlag(FLAGS_kv_host_tier_policy);
  if (policy != "lru" && policy != "lfu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_host_tier_policy: '", policy, "' is not lru or lfu"));
  }
  c.kv_host_tier_policy = policy == "lfu" ? HostKvTier::Policy::kLfu : HostKvTier::Policy::kLru;
  c.kv_disk_tier_dir = absl::GetFlag(FLAGS_kv_disk_tier_dir);
  c.kv_disk_tier_mb = absl::GetFlag(FLAGS_kv_disk_tier_mb);
  c.kv_pin_prompts = absl::GetFlag(FLAGS_kv_pin_prompts);
  if (c.kv_disk_tier_mb < 0) return absl::InvalidArgumentError("--kv_disk_tier_mb must be >= 0");
  if (c.kv_disk_tier_mb > 0 && (c.kv_disk_tier_dir.empty() || c.kv_host_tier_mb == 0)) {
    return absl::InvalidArgumentError(
        "--kv_disk_tier_mb needs --kv_disk_tier_dir and a host tier (--kv_host_tier_mb)");
  }
  return absl::OkStatus();
}

// The gRPC, metrics and MoQT endpoints, and where the scheduler and relay are.
absl::Status NetworkFromFlags(const std::string& default_grpc_listen, WorkerConfig* config) {
  WorkerConfig& c = *config;
  c.grpc.listen = absl::GetFlag(FLAGS_grpc_listen);
  if (c.grpc.listen.empty()) c.grpc.listen = default_grpc_listen;
  c.grpc.cert_file = absl::GetFlag(FLAGS_grpc_cert);
  c.grpc.key_file = absl::GetFlag(FLAGS_grpc_key);
  c.grpc.ca_file = absl::GetFlag(FLAGS_grpc_ca);
  c.grpc_client_ca = c.grpc.ca_file;
  if (!c.grpc.ca_file.empty()) {  // mutual TLS: present our certificate to the scheduler
    c.grpc_client_cert = c.grpc.cert_file;
    c.grpc_client_key = c.grpc.key_file;
  }
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.scheduler = absl::GetFlag(FLAGS_scheduler);
  c.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  if (c.advertise_host.empty()) return absl::InvalidArgumentError("--advertise_host is empty");
  c.moqt_listen = absl::GetFlag(FLAGS_moqt_listen);
  c.relay = absl::GetFlag(FLAGS_relay);
  const int32_t udp = absl::GetFlag(FLAGS_quic_max_udp_payload);
  if (udp != 0 && (udp < 1200 || udp > 16384)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quic_max_udp_payload must be 0 or 1200..16384, got ", udp));
  }
  c.quic_max_udp_payload = udp;
  return absl::OkStatus();
}

// QUIC's TLS and MoQT authorization (or --insecure, loudly).
absl::Status SecurityFromFlags(WorkerConfig* config) {
  WorkerConfig& c = *config;
  const std::string cert = absl::GetFlag(FLAGS_quic_cert), key = absl::GetFlag(FLAGS_quic_key),
                    ca = absl::GetFlag(FLAGS_quic_ca);
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        "--quic_cert and --quic_key are required (QUIC always uses TLS; "
        "`kvcast-devcert` makes a development pair)");
  }
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (ca.empty() && !insecure) {
    return absl::InvalidArgumentError(
        "--quic_ca is required: the CA (PEM) that signed the relays' and workers' QUIC "
        "certificates (`kvcast-devcert` makes a development CA); --insecure turns "
        "verification off, for development only");
  }
  if (insecure) {
    services::Log().warn(
        "--insecure: QUIC peers are NOT verified and any host that reaches the MoQT port may fetch "
        "or publish KV");
  }
  c.quic_server.cert_file = cert;
  c.quic_server.key_file = key;
  c.quic_server.ca_file = ca;
  c.quic_server.require_client_cert = !insecure;
  c.quic_client.cert_file = cert;
  c.quic_client.key_file = key;
  c.quic_client.ca_file = ca;
  c.quic_client.insecure_skip_verify = insecure;
  const std::string auth_keys = absl::GetFlag(FLAGS_moqt_auth_key_file);
  if (auth_keys.empty() && !insecure) {
    return absl::InvalidArgumentError(
        "--moqt_auth_key_file is required: the keys that sign MoQT authorization tokens "
        "(the same file as the scheduler's and the relay's); --insecure serves MoQT requests "
        "without tokens, for development only");
  }
  if (!auth_keys.empty()) {
    auto authority = moqt::HmacTokenAuthority::FromFile(auth_keys);
    if (!authority.ok()) {
      return absl::Status(authority.status().code(),
                          absl::StrCat("--moqt_auth_key_file: ", authority.status().message()));
    }
    c.moqt_auth = *authority;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerConfig> WorkerConfigFromFlags(v1::WorkerRole role,
                                                   const std::string& default_grpc_listen) {
  WorkerConfig c;
  c.role = role;
  RETURN_IF_ERROR(services::InitLogging(
      role == v1::WORKER_ROLE_PREFILL ? "kvcast-prefill" : "kvcast-decode",
      absl::GetFlag(FLAGS_log_level)));
  RETURN_IF_ERROR(EngineFromFlags(&c));
  RETURN_IF_ERROR(NetworkFromFlags(default_grpc_listen, &c));
  RETURN_IF_ERROR(SecurityFromFlags(&c));
  const double hb = absl::GetFlag(FLAGS_heartbeat_s);
  if (!(hb > 0)) return absl::InvalidArgumentError("--heartbeat_s must be positive");
  c.heartbeat = absl::Seconds(hb);
  return c;
}

}  // namespace kvcast::worker
