// kvcast-moqt: a MoQT publisher and subscriber for interop and network tests.
//
//   kvcast-moqt publish   --relay H:P --ns a/b --track t --groups G \
//                         --objects N --size BYTES --seed S
//   kvcast-moqt subscribe --relay H:P --ns a/b --track t --groups G \
//                         --objects N --size BYTES --seed S [--filter largest]
//   kvcast-moqt fetch     (same flags as subscribe)
//   kvcast-moqt token     --auth_key_file K --ns a/b [--ops read|publish] [--ttl_s 300]
//                         prints the hex of a token's value (for another peer,
//                         e.g. aiomoqt's AUTH_TOKEN parameter)
//
// With --auth_key_file, publish/subscribe/fetch attach a token they sign
// for --ns (transport/moqt/authorization.h).
//
// Payloads are InteropPayload(seed, group, object, size), the function the
// Python interop scripts use. `subscribe`/`fetch` verify every byte and exit
// 0 only when all G*N objects arrived intact. Each mode ends with one JSON
// summary line on stdout. Every run is bounded by --timeout_s.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "transport/moqt/authorization.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "transport/moqt/tools/client_tls_flags.h"
#include "transport/moqt/tools/interop_payload.h"
#include "transport/moqt/tools/tool_flags.h"

ABSL_FLAG(std::string, relay, "127.0.0.1:4433", "relay address HOST:PORT");
ABSL_FLAG(std::string, ns, "kvcast/interop", "track namespace, elements split on --ns_sep");
ABSL_FLAG(std::string, ns_sep, "/", "the one character between --ns elements");
ABSL_FLAG(std::string, track, "data", "track name");
ABSL_FLAG(int64_t, groups, 4, "groups in the track");
ABSL_FLAG(int64_t, objects, 8, "objects per group");
ABSL_FLAG(int64_t, size, 1024, "payload bytes per object");
ABSL_FLAG(uint64_t, seed, 1, "payload seed");
ABSL_FLAG(std::string, filter, "absolute", "subscribe filter: absolute (from 0/0) or largest");
ABSL_FLAG(std::string, start, "subscriber",
          "publish: when to send objects: 'now' or 'subscriber' (on the first SUBSCRIBE)");
ABSL_FLAG(int64_t, linger_ms, 2000, "publish: stay connected this long after the track ended");
ABSL_FLAG(int64_t, timeout_s, 60, "give up after this many seconds");
ABSL_FLAG(std::string, auth_key_file, "", "MoQT authorization keys: sign a token for --ns");
ABSL_FLAG(std::string, ops, "read", "token: read (SUBSCRIBE, FETCH, TRACK_STATUS) or publish");
ABSL_FLAG(int64_t, ttl_s, 300, "token lifetime in seconds");

namespace kvcast::moqt {
namespace {

absl::StatusOr<TrackNamespace> NsFromFlags() {
  const std::string sep = absl::GetFlag(FLAGS_ns_sep);
  if (sep.size() != 1) return absl::InvalidArgumentError("--ns_sep must be one character");
  return ParseNamespace(absl::GetFlag(FLAGS_ns), sep[0]);
}

// The AUTHORIZATION TOKEN parameters for `ops` on --ns (none without
// --auth_key_file). Exits on a bad key file.
Parameters AuthParams(const TrackNamespace& ns, uint8_t ops) {
  const std::string file = absl::GetFlag(FLAGS_auth_key_file);
  if (file.empty()) return {};
  auto authority = HmacTokenAuthority::FromFile(file);
  if (!authority.ok()) {
    std::fprintf(stderr, "kvcast-moqt: %s\n", std::string(authority.status().ToString()).c_str());
    std::exit(2);
  }
  return {(*authority)->MintParameter(ns, ops,
                                      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_ttl_s)))};
}

struct Result {
  uint64_t received = 0;
  uint64_t bad = 0;
  uint64_t bytes = 0;
  bool done = false;
  std::string error;
};

// Subscriber side: verifies each object against the interop payload.
class Verifier : public TrackConsumer {
 public:
  Verifier(Result* result, quic::EventLoop* loop, uint64_t expected)
      : result_(result), loop_(loop), expected_(expected) {}
  void OnObject(const ObjectHeader& h, absl::Span<const uint8_t> payload) override {
    if (h.status != ObjectStatus::kNormal) return;
    std::string want = InteropPayload(absl::GetFlag(FLAGS_seed), h.group, h.object,
                                      absl::GetFlag(FLAGS_size));
    bool ok = payload.size() == want.size() &&
              std::equal(payload.begin(), payload.end(),
                         reinterpret_cast<const uint8_t*>(want.data()));
    ++result_->received;
    result_->bytes += payload.size();
    if (!ok) {
      ++result_->bad;
      std::fprintf(stderr, "object %llu/%llu: payload differs (%zu bytes)\n",
                   (unsigned long long)h.group, (unsigned long long)h.object, payload.size());
    }
    if (result_->received >= expected_) {
      result_->done = true;
      loop_->Stop();
    }
  }
  void OnDone(const absl::Status& status) override {
    if (!result_->done) {
      result_->error = status.ok() ? "track ended before every object arrived"
                                   : std::string(status.ToString());
      loop_->Stop();
    }
  }

 private:
  Result* result_;
  quic::EventLoop* loop_;
  uint64_t expected_;
};

class SubscriberHandler : public RequestHandler {
 public:
  SubscriberHandler(quic::EventLoop* loop, Result* result, FullTrackName track, bool fetch)
      : loop_(loop), result_(result), track_(std::move(track)), fetch_(fetch) {}
  void OnSessionReady(MoqtSession* session) override {
    uint64_t groups = absl::GetFlag(FLAGS_groups), objects = absl::GetFlag(FLAGS_objects);
    auto verifier = std::make_shared<Verifier>(result_, loop_, groups * objects);
    auto on_reply = [this](absl::StatusOr<TrackInfo> info) {
      if (!info.ok()) {
        result_->error = std::string(info.status().ToString());
        loop_->Stop();
      }
    };
    absl::StatusOr<uint64_t> id;
    if (fetch_) {
      Fetch f;
      f.track = track_;
      f.start = Location{0, 0};
      f.end = Location{groups - 1, objects};
      f.parameters = AuthParams(track_.ns, kAuthRead);
      id = session->Fetch(f, verifier, on_reply);
    } else {
      Subscribe s;
      s.track = track_;
      if (absl::GetFlag(FLAGS_filter) == "largest") {
        s.filter_type = FilterType::kLargestObject;
      } else {
        s.filter_type = FilterType::kAbsoluteStart;
        s.start = Location{0, 0};
      }
      s.parameters = AuthParams(track_.ns, kAuthRead);
      id = session->Subscribe(s, verifier, on_reply);
    }
    if (!id.ok()) {
      result_->error = std::string(id.status().ToString());
      loop_->Stop();
    }
  }
  void OnSessionClosed(MoqtSession*, const absl::Status& reason) override {
    if (!result_->done && result_->error.empty()) {
      result_->error = absl::StrCat("session closed: ", std::string(reason.ToString()));
    }
    loop_->Stop();
  }

 private:
  quic::EventLoop* loop_;
  Result* result_;
  FullTrackName track_;
  bool fetch_;
};

// Publisher side: a local-origin relay that announces its namespace upstream.
class PublisherHandler : public Relay {
 public:
  PublisherHandler(quic::EventLoop* loop, FullTrackName track, Result* result)
      : Relay(loop, RelayOptions{TrackBytes() * 2 + (1 << 20), absl::ZeroDuration()}),
        loop_(loop), track_(std::move(track)), result_(result) {
    AddLocalNamespace(track_.ns);
  }
  static uint64_t TrackBytes() {
    return static_cast<uint64_t>(absl::GetFlag(FLAGS_groups)) * absl::GetFlag(FLAGS_objects) *
           (absl::GetFlag(FLAGS_size) + 64);
  }
  void OnSessionReady(MoqtSession* session) override {
    AnnounceTo(session, [this](absl::Status s) {
      if (!s.ok()) {
        result_->error = absl::StrCat("PUBLISH_NAMESPACE refused: ", std::string(s.ToString()));
        loop_->Stop();
        return;
      }
      std::fprintf(stderr, "namespace %s announced\n", ToString(track_.ns).c_str());
      announced_ = true;
      if (absl::GetFlag(FLAGS_start) == "now" || num_subscribers(track_) > 0) PublishAll();
    }, AuthParams(track_.ns, kAuthPublishNamespace));
  }
  // --start subscriber: the first SUBSCRIBE of our track starts the objects
  // (after it is accepted, so its filter sees them as new).
  void OnSubscribe(MoqtSession* session, const Subscribe& request,
                   std::shared_ptr<Downstream> downstream) override {
    Relay::OnSubscribe(session, request, std::move(downstream));
    if (request.track == track_ && announced_ && !published_) {
      loop_->Post([this] {
        if (!published_) PublishAll();
      });
    }
  }
  void OnSessionClosed(MoqtSession* session, const absl::Status& reason) override {
    Relay::OnSessionClosed(session, reason);
    if (!result_->done && result_->error.empty()) {
      result_->error = absl::StrCat("session closed: ", std::string(reason.ToString()));
    }
    loop_->Stop();
  }

 private:
  void PublishAll() {
    published_ = true;
    uint64_t groups = absl::GetFlag(FLAGS_groups), objects = absl::GetFlag(FLAGS_objects);
    for (uint64_t g = 0; g < groups; ++g) {
      for (uint64_t o = 0; o < objects; ++o) {
        std::string p = InteropPayload(absl::GetFlag(FLAGS_seed), g, o, absl::GetFlag(FLAGS_size));
        ObjectHeader h;
        h.group = g;
        h.object = o;
        h.payload_length = p.size();
        PublishObject(track_, h, absl::Span<const uint8_t>(
                                     reinterpret_cast<const uint8_t*>(p.data()), p.size()));
        ++result_->received;
        result_->bytes += p.size();
      }
    }
    EndTrack(track_);
    result_->done = true;
    loop_->RunAfter(absl::Milliseconds(absl::GetFlag(FLAGS_linger_ms)), [this] { loop_->Stop(); });
  }

  quic::EventLoop* loop_;
  FullTrackName track_;
  Result* result_;
  bool announced_ = false;
  bool published_ = false;
};

int PrintToken() {
  auto ns = NsFromFlags();
  const std::string ops = absl::GetFlag(FLAGS_ops);
  if (!ns.ok() || absl::GetFlag(FLAGS_auth_key_file).empty() ||
      (ops != "read" && ops != "publish")) {
    std::fprintf(stderr, "kvcast-moqt token: needs --auth_key_file, a valid --ns and "
                         "--ops read|publish\n");
    return 2;
  }
  Parameters p = AuthParams(*ns, ops == "read" ? kAuthRead : kAuthPublishNamespace);
  absl::StatusOr<AuthToken> token = ParseAuthToken(p.front().bytes_value);
  std::printf("%s\n", absl::BytesToHexString(token->value).c_str());
  return 0;
}

int Run(const std::string& mode) {
  if (mode == "token") return PrintToken();
  auto addr = ParseHostPort(absl::GetFlag(FLAGS_relay));
  auto ns = NsFromFlags();
  if (!addr.ok() || !ns.ok()) {
    std::fprintf(stderr, "kvcast-moqt: %s\n",
                 std::string((addr.ok() ? ns.status() : addr.status()).ToString()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_groups) <= 0 || absl::GetFlag(FLAGS_objects) <= 0 ||
      absl::GetFlag(FLAGS_size) < 0) {
    std::fprintf(stderr, "kvcast-moqt: --groups and --objects must be > 0, --size >= 0\n");
    return 2;
  }
  auto loop_or = quic::EventLoop::Create();
  if (!loop_or.ok()) return 1;
  quic::EventLoop* loop = loop_or->get();
  FullTrackName track{*ns, absl::GetFlag(FLAGS_track)};

  const quic::TlsOptions tls = ClientTlsFromFlags();

  Result result;
  std::unique_ptr<RequestHandler> handler;
  if (mode == "publish") {
    handler = std::make_unique<PublisherHandler>(loop, track, &result);
  } else {
    handler = std::make_unique<SubscriberHandler>(loop, &result, track, mode == "fetch");
  }
  absl::Time start = absl::Now();
  auto client = MoqtClient::Connect(loop, addr->first, addr->second, tls,
                                    quic::TransportOptions{}, SessionOptions{}, handler.get());
  if (!client.ok()) {
    std::fprintf(stderr, "kvcast-moqt: %s\n", std::string(client.status().ToString()).c_str());
    return 1;
  }
  loop->RunAfter(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)), [&] {
    if (result.error.empty() && !result.done) result.error = "timed out";
    loop->Stop();
  });
  loop->Run();
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (result.done && mode == "publish") {
    (*client)->session()->Close(TerminationCode::kNoError, "done");
  }
  client->reset();
  uint64_t expected = absl::GetFlag(FLAGS_groups) * absl::GetFlag(FLAGS_objects);
  bool ok = result.done && result.bad == 0 && result.error.empty();
  std::replace(result.error.begin(), result.error.end(), '"', '\'');
  std::printf("{\"mode\":\"%s\",\"ok\":%s,\"objects\":%llu,\"expected\":%llu,\"bad\":%llu,"
              "\"bytes\":%llu,\"seconds\":%.3f,\"mbit_per_s\":%.1f,\"error\":\"%s\"}\n",
              mode.c_str(), ok ? "true" : "false", (unsigned long long)result.received,
              (unsigned long long)expected, (unsigned long long)result.bad,
              (unsigned long long)result.bytes, seconds,
              seconds > 0 ? result.bytes * 8 / seconds / 1e6 : 0.0, result.error.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kvcast::moqt

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2 || (std::string(args[1]) != "publish" &&
                           std::string(args[1]) != "subscribe" &&
                           std::string(args[1]) != "fetch" &&
                           std::string(args[1]) != "token")) {
    std::fprintf(stderr, "usage: kvcast-moqt publish|subscribe|fetch|token [flags]  (--help)\n");
    return 2;
  }
  return kvcast::moqt::Run(args[1]);
}
