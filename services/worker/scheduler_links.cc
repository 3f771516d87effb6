#include "services/worker/scheduler_links.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/common/grpc_server.h"
#include "services/common/log.h"

namespace kvcast::worker {
namespace {

bool IsAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

absl::StatusOr<std::vector<SchedulerTarget>> ParseSchedulerTargets(const std::string& flag) {
  std::vector<SchedulerTarget> out;
  for (absl::string_view item : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t colon = item.rfind(':');
    SchedulerTarget t;
    uint32_t port = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(item.substr(colon + 1), &port) ||
        port == 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler: \"", std::string(item), "\" is not HOST:PORT"));
    }
    absl::string_view host = item.substr(0, colon);
    if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler: \"", std::string(item), "\" has an unclosed '['"));
    }
    if (host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler: \"", std::string(item), "\" has no host"));
    }
    t.host = std::string(host);
    t.port = uint16_t(port);
    out.push_back(std::move(t));
  }
  if (out.empty()) return absl::InvalidArgumentError("--scheduler: no HOST:PORT given");
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveReplicas(const SchedulerTarget& target) {
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(target.host.c_str(), nullptr, &hints, &res);
    if (rc != 0) {
      if (family == AF_INET) continue;
      return absl::UnavailableError(
          absl::StrCat("cannot resolve ", target.host, ": ", gai_strerror(rc)));
    }
    std::set<std::string> seen;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      const void* src = family == AF_INET
                            ? static_cast<const void*>(
                                  &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                            : static_cast<const void*>(
                                  &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (inet_ntop(family, src, ip, sizeof(ip)) == nullptr) continue;
      seen.insert(family == AF_INET ? absl::StrCat(ip, ":", target.port)
                                    : absl::StrCat("[", ip, "]:", target.port));
    }
    freeaddrinfo(res);
    if (!seen.empty()) return std::vector<std::string>(seen.begin(), seen.end());
  }
  return absl::UnavailableError(absl::StrCat("cannot resolve ", target.host));
}

void SchedulerLinks::Record(bool stored, const Hash128& hash, v1::KvTier tier) {
  absl::MutexLock lock(&mu_);
  if (stored) {
    auto [it, added] = held_.try_emplace(hash, tier);
    if (!added && it->second == tier) return;
    it->second = tier;
  } else if (held_.erase(hash) == 0) {
    return;
  }
  const auto kind = stored ? v1::KvEvent::KIND_STORED : v1::KvEvent::KIND_EVICTED;
  for (auto& [address, events] : pending_) {
    if (events.empty() || events.back().kind() != kind || events.back().tier() != tier) {
      events.emplace_back();
      events.back().set_kind(kind);
      events.back().set_tier(tier);
    }
    events.back().add_chunk_hashes(HashToBytes(hash));
  }
}

void SchedulerLinks::Published(const std::string& prompt_digest,
                               absl::Span<const Hash128> chain) {
  v1::KvEvent e;
  e.set_kind(v1::KvEvent::KIND_PUBLISHED);
  e.set_prompt_digest(prompt_digest);
  for (const Hash128& h : chain) e.add_chunk_hashes(HashToBytes(h));
  absl::MutexLock lock(&mu_);
  for (auto& [address, events] : pending_) events.push_back(e);
}

absl::Status SchedulerLinks::Start(Options options) {
  auto targets = ParseSchedulerTargets(options.scheduler);
  if (!targets.ok()) return targets.status();
  targets_ = std::move(*targets);
  options_ = std::move(options);
  Resolve();
  resolver_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.resolve_every)) Resolve();
  });
  return absl::OkStatus();
}

void SchedulerLinks::Resolve() {
  std::map<std::string, std::string> want;  // address -> TLS name
  for (const SchedulerTarget& t : targets_) {
    auto replicas = ResolveReplicas(t);
    const std::string tls_name = IsAddress(t.host) ? "" : t.host;
    if (!replicas.ok()) {
      services::Log().warn("scheduler {}: {} (keeping {})", t.host.c_str(),
                           std::string(replicas.status().message()).c_str(),
                           links_.empty() ? "none" : "the replicas it had");
      for (const auto& [address, link] : links_) {
        if (link->tls_name == tls_name) want[address] = tls_name;
      }
      continue;
    }
    for (const std::string& a : *replicas) want[a] = tls_name;
  }
  for (auto it = links_.begin(); it != links_.end();) {
    if (want.count(it->first) > 0) {
      ++it;
      continue;
    }
    services::Log().info("scheduler replica {} left", it->first.c_str());
    it->second->stop.Notify();
    it->second->thread.join();
    it = links_.erase(it);
  }
  for (const auto& [address, tls_name] : want) {
    if (links_.count(address) > 0) continue;
    auto link = std::make_unique<Link>();
    link->address = address;
    link->tls_name = tls_name;
    Link* l = link.get();
    link->thread = std::thread([this, l] { Run(l); });
    links_[address] = std::move(link);
  }
}

void SchedulerLinks::Run(Link* link) {
  auto stub = v1::Registry::NewStub(
      services::MakeChannel(link->address, options_.creds, link->tls_name));
  bool registered = false;
  absl::Duration interval = options_.heartbeat;
  std::string last_error;
  auto set_registered = [&](bool now) {
    if (now != registered) registered_ += now ? 1 : -1;
    registered = now;
    if (!now) {
      absl::MutexLock lock(&mu_);
      pending_.erase(link->address);
    }
  };
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status st;
    if (!registered) {
      v1::RegisterRequest req;
      *req.mutable_worker() = options_.info();
      *req.mutable_load() = options_.load();
      {
        // The snapshot and the start of this replica's event queue at once.
        absl::MutexLock lock(&mu_);
        for (const auto& [h, tier] : held_) {
          req.add_cached_chunks(HashToBytes(h));
          req.add_cached_chunk_tiers(tier);
        }
        pending_[link->address].clear();
      }
      v1::RegisterResponse resp;
      st = stub->Register(&ctx, req, &resp);
      set_registered(st.ok());
      if (st.ok()) {
        if (resp.lease_s() > 0) {
          interval = std::min(options_.heartbeat, absl::Seconds(resp.lease_s() / 3));
        }
        services::Log().info("worker {}: registered with {}", options_.worker_id.c_str(),
                             link->address.c_str());
      }
    } else {
      v1::HeartbeatRequest req;
      req.set_worker_id(options_.worker_id);
      *req.mutable_load() = options_.load();
      std::vector<v1::KvEvent> events;
      {
        absl::MutexLock lock(&mu_);
        events.swap(pending_[link->address]);
      }
      for (auto& e : events) *req.add_events() = std::move(e);
      v1::HeartbeatResponse resp;
      st = stub->Heartbeat(&ctx, req, &resp);
      // Events of a failed heartbeat are lost: register again with a snapshot.
      if (!st.ok() || resp.reregister()) set_registered(false);
    }
    if (!st.ok() && st.error_message() != last_error) {
      services::Log().warn("scheduler {}: {} (retrying)", link->address.c_str(),
                           st.error_message().c_str());
    }
    last_error = st.ok() ? "" : st.error_message();
  } while (!link->stop.WaitForNotificationWithTimeout(interval));
  if (registered) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::DeregisterRequest req;
    req.set_worker_id(options_.worker_id);
    v1::DeregisterResponse resp;
    stub->Deregister(&ctx, req, &resp);
    set_registered(false);
  }
}

void SchedulerLinks::Stop() {
  if (stop_.HasBeenNotified()) return;
  stop_.Notify();
  if (resolver_.joinable()) resolver_.join();
  for (auto& [address, link] : links_) link->stop.Notify();
  for (auto& [address, link] : links_) {
    if (link->thread.joinable()) link->thread.join();
  }
  links_.clear();
}

}  // namespace kvcast::worker
