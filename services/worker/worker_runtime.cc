#include "services/worker/worker_runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer.h"
#include "services/common/log.h"
#include "services/common/moqt_auth_metrics.h"
#include "transport/kvcache/naming.h"
#include "transport/moqt/tools/tool_flags.h"

namespace kvcast::worker {
namespace {

// kvcast_kv_<tier>_tier_<field> gauges of a KV tier's stats.
template <typename Stats>
void ExportTier(services::MetricsRegistry* metrics, const std::string& tier,
                std::function<Stats()> stats,
                std::vector<std::pair<std::string, uint64_t Stats::*>> fields) {
  for (const auto& [what, field] : fields) {
    metrics->AddCallbackGauge(absl::StrCat("kvcast_kv_", tier, "_tier_", what),
                              absl::StrCat(tier, " KV tier: ", what),
                              [stats, field = field] { return double(stats().*field); });
  }
}

std::string BaseName(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace

WorkerRuntime::WorkerRuntime(const WorkerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<WorkerRuntime>> WorkerRuntime::Create(const WorkerConfig& config) {
  auto backend = NewBackend(config.backend, config.device);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(), absl::StrCat("--backend=", config.backend, ": ",
                                                              backend.status().message()));
  }
  std::unique_ptr<WorkerRuntime> rt(new WorkerRuntime(config));
  EngineOptions options;
  options.chunk_tokens = config.chunk_tokens;
  options.kv_cache_bytes = int64_t(config.kv_cache_mb) << 20;
  options.kv_cache_fraction = config.kv_cache_fraction;
  options.max_batch_tokens = config.max_batch_tokens;
  options.prefix_caching = config.prefix_caching;
  options.kv_fp16_values = config.kv_fp16_values;
  options.host_tier_bytes = int64_t(config.kv_host_tier_mb) << 20;
  options.host_tier_format = config.kv_host_tier_format;
  options.host_tier_policy = config.kv_host_tier_policy;
  options.disk_tier_dir = config.kv_disk_tier_dir;
  options.disk_tier_bytes = int64_t(config.kv_disk_tier_mb) << 20;
  ASSIGN_OR_RETURN(rt->engine_, Engine::Create(config.model_dir, options, *std::move(backend)));
  rt->model_name_ = config.model_name.empty() ? BaseName(config.model_dir) : config.model_name;
  if (const KvLayout& l = rt->engine_->pool().layout(); config.ac_tuning) {
    if (absl::Status s = kvcache::ac::CheckTuningShape(*config.ac_tuning, l.num_layers,
                                                        l.num_kv_heads, l.head_dim);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--ac_tuning: ", s.message()));
    }
  }
  if (config.kv_basis) {
    rt->xl_codec_ = std::make_unique<kvcache::XlPageCodec>(
        rt->engine_->pool().layout(), RopeInverseFrequencies(rt->engine_->model().config()),
        config.kv_basis);
    if (absl::Status s = rt->xl_codec_->Supported(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--kv_basis: ", s.message()));
    }
  }
  WorkerRuntime* self = rt.get();
  rt->engine_->prefix_cache().SetObserver([self](PrefixCache::Event e, const Hash128& h) {
    switch (e) {
      case PrefixCache::Event::kStored:
        return self->links_.Record(true, h, v1::KV_TIER_GPU);  // the pool, whatever the backend
      case PrefixCache::Event::kInHost:
        return self->links_.Record(true, h, v1::KV_TIER_HOST);
      case PrefixCache::Event::kOnDisk:
        return self->links_.Record(true, h, v1::KV_TIER_DISK);
      case PrefixCache::Event::kEvicted:
        return self->links_.Record(false, h, v1::KV_TIER_UNSPECIFIED);
    }
  });
  if (DiskKvTier* disk = rt->engine_->disk_tier()) {
    // What a previous run left on disk: in the registration snapshot, so the
    // router sends those prefixes here again.
    for (const Hash128& h : disk->Chunks()) rt->links_.Record(true, h, v1::KV_TIER_DISK);
  }
  // Before the compute thread: the model is ours alone.
  auto calibration =
      Calibrate(rt->engine_->model(), &rt->engine_->pool(), config.chunk_tokens);
  if (!calibration.ok()) {
    // The scheduler then bounds this worker's silence by its floors alone.
    services::Log().warn("no calibration: {}", calibration.status().ToString().c_str());
  } else {
    rt->calibration_ = *calibration;
    services::Log().info(
        "calibrated on --backend={}: a {}-token prompt chunk in {:.1f} ms ({:.0f} tokens/s), a "
        "decode step in {:.2f} ms",
        config.backend.c_str(), rt->calibration_.chunk_tokens, rt->calibration_.chunk_ms,
        1000.0 * rt->calibration_.chunk_tokens / rt->calibration_.chunk_ms,
        rt->calibration_.step_ms);
  }
  ASSIGN_OR_RETURN(rt->loop_thread_, quic::LoopThread::Start("moqt-loop"));
  rt->ac_thread_ = std::make_unique<kvcache::AcCodecThread>(rt->engine_->pool().layout(),
                                                            rt->loop_thread_->loop());
  if (rt->xl_codec_) {  // xl groups landing here decode on it too
    rt->ac_thread_->SetKvBasis(rt->xl_codec_->basis(), rt->xl_codec_->rope_inv_freq());
  }
  rt->compute_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "engine");
    self->ComputeLoop();
  });
  return rt;
}

WorkerRuntime::~WorkerRuntime() {
  Shutdown(absl::ZeroDuration());
  StopCompute();
}

void WorkerRuntime::StopCompute() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (compute_.joinable()) compute_.join();
}

absl::Status WorkerRuntime::CheckPagesReleased() {
  StopCompute();
  // Requests whose calls ended with the server: cancelled, then one step
  // each at most lets the engine drop them (their handles with them).
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, cb] : callbacks_) engine_->Cancel(id);
    callbacks_.clear();
  }
  for (int steps = 0; engine_->HasWork() && steps < 1000; ++steps) {
    if (absl::Status s = engine_->Step().status(); !s.ok()) return s;
  }
  if (engine_->HasWork()) return absl::InternalError("drained: the engine still has work");
  engine_->prefix_cache().Reclaim(std::numeric_limits<int>::max());
  const KvPagePool& pool = engine_->pool();
  const int pinned = engine_->prefix_cache().num_pinned() *
                     (config_.chunk_tokens / pool.layout().page_tokens);
  const int owned = pool.num_pages() - pinned;
  const int held = owned - pool.free_pages();
  if (held != 0) {
    services::Log().error("drained: {} of {} KV pages still held after the last request "
                          "(a leak)", held, owned);
    return absl::InternalError(absl::StrCat("drained: ", held, " of ", owned,
                                            " KV pages still held (a leak)"));
  }
  services::Log().info("drained: all {} KV pages free{}", owned,
                       pinned > 0 ? absl::StrCat(" (", pinned, " pinned)") : "");
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> WorkerRuntime::Submit(std::vector<int32_t> prompt,
                                               const GenerationParams& params, PrefilledKv kv,
                                               EventCallback on_event) {
  // On this (the request's) thread, before the lock the compute thread's
  // callbacks take: the prefix's promotion overlaps the running batch.
  if (kv.tokens == 0) engine_->Prefetch(prompt, params.tenant);
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("worker is shutting down");  // kv's pages go with it
  ASSIGN_OR_RETURN(uint64_t id, engine_->Submit(std::move(prompt), params, std::move(kv)));
  callbacks_[id] = std::move(on_event);
  return id;
}

absl::Status WorkerRuntime::PinPrompts() {
  std::ifstream in(config_.kv_pin_prompts);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--kv_pin_prompts: cannot read ", config_.kv_pin_prompts));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(config_.model_dir));
  const int chunk = config_.chunk_tokens;
  int prompts = 0, chunks = 0, line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(line, /*add_bos=*/true));
    const std::vector<Hash128> chain = ChunkHashChain(engine_->prefix_seed(""), ids, chunk);
    if (chain.empty()) {
      services::Log().warn(
          "--kv_pin_prompts line {}: {} tokens, less than a chunk ({}): nothing to pin", line_no,
          ids.size(), chunk);
      continue;
    }
    engine_->prefix_cache().Pin(chain);
    absl::Notification done;
    GenerationParams params;
    params.max_tokens = 1;
    params.ignore_eos = true;
    RETURN_IF_ERROR(Submit(std::move(ids), params, PrefilledKv(), [&](const SequenceEvent& ev) {
                      if (ev.finish != FinishReason::kNone) done.Notify();
                    }).status());
    done.WaitForNotification();
    ++prompts;
    chunks += int(chain.size());
  }
  if (engine_->prefix_cache().num_pinned() != chunks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--kv_pin_prompts: ", chunks, " chunks to pin, ", engine_->prefix_cache().num_pinned(),
        " in the page pool: raise --kv_cache_mb"));
  }
  services::Log().info("pinned {} chunks of {} prompts", chunks, prompts);
  return absl::OkStatus();
}

void WorkerRuntime::Cancel(uint64_t id) { engine_->Cancel(id); }

void WorkerRuntime::ComputeLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || engine_->HasWork();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(20));
      if (stop_) break;
      if (!engine_->HasWork()) continue;
    }
    absl::StatusOr<std::vector<SequenceEvent>> events = engine_->Step();
    if (!events.ok()) {
      // The engine cannot go on: fail every request rather than hang them.
      services::Log().error("engine step failed: {}", events.status().ToString().c_str());
      absl::flat_hash_map<uint64_t, EventCallback> all;
      {
        absl::MutexLock lock(&mu_);
        all.swap(callbacks_);
      }
      for (auto& [id, cb] : all) {
        engine_->Cancel(id);
        SequenceEvent ev;
        ev.id = id;
        ev.finish = FinishReason::kError;
        ev.status = events.status();
        cb(ev);
      }
      continue;
    }
    for (const SequenceEvent& ev : *events) {
      EventCallback cb;
      {
        absl::MutexLock lock(&mu_);
        auto it = callbacks_.find(ev.id);
        if (it == callbacks_.end()) continue;
        cb = ev.finish == FinishReason::kNone ? it->second : std::move(it->second);
        if (ev.finish != FinishReason::kNone) callbacks_.erase(it);
      }
      cb(ev);
    }
  }
}

std::string WorkerRuntime::moqt_address() const {
  return absl::StrCat(config_.advertise_host, ":", moqt_port_);
}

void WorkerRuntime::ExportEngineMetrics() {
  metrics_.AddCallbackGauge("kvcast_kv_pages_used", "KV pages in use (running + cached)",
                            [this] {
                              return double(engine_->pool().num_pages() -
                                            engine_->pool().free_pages());
                            });
  metrics_.AddCallbackGauge("kvcast_kv_pages_total", "KV pages in the pool",
                            [this] { return double(engine_->pool().num_pages()); });
  metrics_.AddCallbackGauge("kvcast_prefix_cache_chunks", "chunks held by the prefix cache",
                            [this] { return double(engine_->prefix_cache().num_chunks()); });
  if (HostKvTier* tier = engine_->host_tier()) {
    using S = HostKvTier::Stats;
    ExportTier<S>(&metrics_, "host", [tier] { return tier->stats(); },
                  {{"bytes", &S::bytes}, {"chunks", &S::chunks}, {"hits", &S::hits},
                   {"demotions", &S::demotions}, {"evictions", &S::evictions},
                   {"corrupt", &S::corrupt}});
  }
  if (DiskKvTier* disk = engine_->disk_tier()) {
    using S = DiskKvTier::Stats;
    ExportTier<S>(&metrics_, "disk", [disk] { return disk->stats(); },
                  {{"bytes", &S::bytes}, {"chunks", &S::chunks}, {"hits", &S::hits},
                   {"writes", &S::writes}, {"pending", &S::pending},
                   {"evictions", &S::evictions}, {"rejected", &S::rejected}});
  }
  // The engine's prompt work, as heartbeats report it to the scheduler.
  metrics_.AddCallbackCounter(
      "kvcast_prompt_tokens_computed_total",
      "prompt tokens whose KV this worker computed (not reused, fetched or landed)",
      [this] { return double(engine_->totals().prompt_tokens_computed); });
  metrics_.AddCallbackGauge("kvcast_queue_depth", "requests waiting for the batch",
                            [this] { return double(engine_->num_waiting()); });
  metrics_.AddCallbackGauge("kvcast_running", "sequences in the batch",
                            [this] { return double(engine_->num_running()); });
  // The same under the names the Gateway API Inference Extension's model
  // server protocol (and vLLM's dashboards) read.
  const services::MetricLabels model{{"model_name", model_name_}};
  metrics_.AddCallbackGauge("vllm:num_requests_waiting", "requests waiting for the batch",
                            [this] { return double(engine_->num_waiting()); }, model);
  metrics_.AddCallbackGauge("vllm:num_requests_running", "sequences in the batch",
                            [this] { return double(engine_->num_running()); }, model);
  metrics_.AddCallbackGauge(
      "vllm:kv_cache_usage_perc", "KV pages in use (running + cached) over all pages (0-1)",
      [this] {
        const KvPagePool& pool = engine_->pool();
        return double(pool.num_pages() - pool.free_pages()) / double(pool.num_pages());
      },
      model);
}

absl::Status WorkerRuntime::Serve(moqt::RequestHandler* handler,
                                  std::vector<services::NamedService> services) {
  handler_ = handler;
  ASSIGN_OR_RETURN(auto moqt_listen, moqt::ParseHostPort(config_.moqt_listen));
  if (!config_.relay.empty()) {
    ASSIGN_OR_RETURN(relay_, moqt::ParseHostPort(config_.relay));
  }
  absl::Status st;
  RunSync([&] {
    moqt::SessionOptions server_options;
    server_options.authorizer = config_.moqt_auth;
    quic::TransportOptions transport;
    transport.max_udp_payload = config_.quic_max_udp_payload;
    auto server = moqt::MoqtServer::Create(loop(), moqt_listen.first, moqt_listen.second,
                                           config_.quic_server, transport, server_options,
                                           handler_);
    if (!server.ok()) {
      st = server.status();
      return;
    }
    moqt_server_ = std::move(*server);
    moqt_port_ = moqt_server_->port();
    if (!config_.relay.empty()) WatchRelay();
  });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("--moqt_listen: ", st.message()));
  ASSIGN_OR_RETURN(grpc_, services::GrpcServer::Start(config_.grpc, std::move(services)));
  if (!config_.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(metrics_server_,
                     services::MetricsServer::Start(config_.metrics_listen, &metrics_));
  }
  worker_id_ = absl::StrCat(config_.advertise_host, ":", grpc_->port(), "/", getpid(), "-",
                            absl::ToUnixMillis(absl::Now()));
  ExportEngineMetrics();
  if (config_.moqt_auth) services::ExportMoqtAuthMetrics(config_.moqt_auth, &metrics_);
  if (!config_.relay.empty()) {
    metrics_.AddCallbackGauge("kvcast_relay_connected",
                              "1 while the MoQT session to --relay is up, else 0",
                              [this] { return relay_up_.load() ? 1.0 : 0.0; });
  }
  if (!config_.kv_pin_prompts.empty()) RETURN_IF_ERROR(PinPrompts());
  metrics_.AddCallbackGauge("kvcast_kv_pinned_chunks", "chunks pinned in the page pool",
                            [this] { return double(engine_->prefix_cache().num_pinned()); });
  if (!config_.scheduler.empty()) {
    auto creds = services::ClientCredentials(config_.grpc_client_cert, config_.grpc_client_key,
                                            config_.grpc_client_ca);
    if (!creds.ok()) return creds.status();
    SchedulerLinks::Options o;
    o.scheduler = config_.scheduler;
    o.creds = *creds;
    o.heartbeat = config_.heartbeat;
    o.worker_id = worker_id_;
    o.info = [this] { return Info(); };
    o.load = [this] { return Load(); };
    RETURN_IF_ERROR(links_.Start(std::move(o)));
    metrics_.AddCallbackGauge("kvcast_scheduler_replicas_registered",
                              "scheduler replicas this worker is registered with",
                              [this] { return double(links_.registered()); });
  }
  return absl::OkStatus();
}

void WorkerRuntime::WatchRelay() {
  if (loop_stopping_) return;
  const bool up = relay_session() != nullptr && relay_session()->ready();
  if (relay_up_.exchange(up) != up) {
    services::Log().info("relay {} {}", config_.relay.c_str(),
                         up ? "connected" : "lost: fetching KV from publishers directly");
  }
  if (relay_client_ == nullptr || relay_client_->session()->closed()) {
    relay_client_.reset();
    auto client = moqt::MoqtClient::Connect(loop(), relay_.first, relay_.second,
                                            config_.quic_client, PeerTransport(),
                                            moqt::SessionOptions{}, handler_);
    if (client.ok()) {
      relay_client_ = std::move(*client);
    } else {
      services::Log().warn("relay {}: {} (retrying)", config_.relay.c_str(),
                           client.status().ToString().c_str());
    }
  }
  loop()->RunAfter(absl::Milliseconds(250), [this] { WatchRelay(); });
}

moqt::MoqtSession* WorkerRuntime::relay_session() const {
  return relay_client_ ? relay_client_->session() : nullptr;
}

// Sessions this worker opens (to the relay, to publishers): a PING every
// second and 5 s of silence end them, so a peer whose host is gone (no ICMP
// either) is noticed in seconds; a dead peer process is noticed at once
// (ICMP port unreachable, transport/quic/udp_socket.h).
quic::TransportOptions WorkerRuntime::PeerTransport() const {
  quic::TransportOptions t;
  t.keep_alive = absl::Seconds(1);
  t.idle_timeout = absl::Seconds(5);
  t.max_udp_payload = config_.quic_max_udp_payload;
  return t;
}

absl::StatusOr<moqt::MoqtSession*> WorkerRuntime::SessionFor(const std::string& address) {
  // The relay while its session is up; without it (not configured, down,
  // or reconnecting), the publisher's own MoQT port, so that a lost relay
  // costs neither a wait nor a recompute.
  if (moqt::MoqtSession* relay = relay_session(); relay != nullptr && relay->ready()) {
    return relay;
  }
  auto it = direct_.find(address);
  if (it != direct_.end() && !it->second->session()->closed()) return it->second->session();
  ASSIGN_OR_RETURN(auto hp, moqt::ParseHostPort(address));
  ASSIGN_OR_RETURN(auto client,
                   moqt::MoqtClient::Connect(loop(), hp.first, hp.second, config_.quic_client,
                                             PeerTransport(), moqt::SessionOptions{},
                                             handler_));
  moqt::MoqtSession* session = client->session();
  direct_[address] = std::move(client);
  return session;
}

v1::WorkerLoad WorkerRuntime::Load() const {
  v1::WorkerLoad load;
  const KvPagePool& pool = engine_->pool();
  const int pages_per_chunk = config_.chunk_tokens / pool.layout().page_tokens;
  // Cached chunks are reclaimed on demand: count their pages as free.
  load.set_free_pages(std::min(pool.num_pages(),
                               pool.free_pages() +
                                   engine_->prefix_cache().num_chunks() * pages_per_chunk));
  load.set_running(engine_->num_running());
  load.set_queued(engine_->num_waiting());
  load.set_queued_tokens(engine_->waiting_prompt_tokens());
  const Engine::Totals done = engine_->totals();
  load.set_sequences_total(done.sequences);
  load.set_prompt_tokens_computed_total(done.prompt_tokens_computed);
  load.set_tokens_generated_total(done.tokens_generated);
  load.set_steps_total(done.steps);
  load.set_step_sequences_total(done.step_sequences);
  load.set_step_seconds_total(done.step_seconds);
  return load;
}

v1::WorkerInfo WorkerRuntime::Info() const {
  v1::WorkerInfo info;
  info.set_worker_id(worker_id_);
  info.set_role(config_.role);
  info.set_grpc_address(absl::StrCat(config_.advertise_host, ":", grpc_->port()));
  info.set_moqt_address(moqt_address());
  info.set_model_name(model_name_);
  info.set_model_id(kvcache::ModelId(engine_->model().fingerprint()));
  info.set_chunk_tokens(config_.chunk_tokens);
  info.set_page_tokens(engine_->pool().layout().page_tokens);
  info.set_total_pages(engine_->pool().num_pages());
  info.set_vocab_size(engine_->config().vocab_size);
  info.set_max_sequence_len(engine_->model().max_sequence_len());
  info.set_calibrated_chunk_ms(calibration_.chunk_ms);
  info.set_calibrated_step_ms(calibration_.step_ms);
  for (int32_t eos : engine_->config().eos_token_ids) info.add_eos_token_ids(eos);
  return info;
}

void WorkerRuntime::Shutdown(absl::Duration grace) {
  links_.Stop();  // deregisters
  if (grpc_) grpc_->Shutdown(grace);
  // Close the MoQT sessions while their handler (owned by the caller) is
  // still alive: closing calls it.
  if (loop_thread_) {
    loop_thread_->RunSync([this] {
      loop_stopping_ = true;
      direct_.clear();
      relay_client_.reset();
      moqt_server_.reset();
      ac_thread_.reset();  // after the sessions: their landings are gone
    });
  }
}

}  // namespace kvcast::worker
