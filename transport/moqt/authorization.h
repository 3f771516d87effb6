// MoQT request authorization: which PUBLISH_NAMESPACE, SUBSCRIBE, FETCH,
// TRACK_STATUS, SUBSCRIBE_NAMESPACE and PUBLISH a session accepts, decided
// by the draft-14 AUTHORIZATION TOKEN parameters (0x03) the request carries.
//
// A session given an Authorizer (SessionOptions::authorizer) asks it about
// every such request before the RequestHandler sees it and answers a refusal
// itself with the request's error message (SUBSCRIBE_ERROR, FETCH_ERROR,
// PUBLISH_NAMESPACE_ERROR, ...) and the draft's code: UNAUTHORIZED (0x1),
// MALFORMED_AUTH_TOKEN (0x10) or EXPIRED_AUTH_TOKEN (0x12).
//
// HmacTokenAuthority is kvcast's token: scoped to a namespace prefix, a set
// of operations and an expiry, signed with HMAC-SHA256 under a shared key.
// The scheduler mints one per request for exactly the prompt's namespace;
// the relay and the workers' MoQT endpoints verify. Its byte layout is in
// docs/security.md ("MoQT authorization").
//
// Thread safety: Authorize and Mint are const and may run on any thread;
// the refusal counters are atomic.
#ifndef KVCAST_TRANSPORT_MOQT_AUTHORIZATION_H_
#define KVCAST_TRANSPORT_MOQT_AUTHORIZATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt {

// Operations a token may grant (a bit set).
enum AuthOp : uint8_t {
  kAuthPublishNamespace = 1 << 0,
  kAuthSubscribe = 1 << 1,
  kAuthFetch = 1 << 2,
  kAuthTrackStatus = 1 << 3,
  kAuthSubscribeNamespace = 1 << 4,
  kAuthPublish = 1 << 5,
};
// What a consumer of a prompt's KV needs.
inline constexpr uint8_t kAuthRead = kAuthSubscribe | kAuthFetch | kAuthTrackStatus;
const char* AuthOpName(AuthOp op);

class Authorizer {
 public:
  virtual ~Authorizer() = default;
  // OK to serve `op` on namespace `ns` (a track's namespace, or the
  // namespace / prefix of a namespace message) for a request carrying
  // `tokens` (its USE_VALUE tokens, in order). A refusal's code says which
  // error the peer gets: PERMISSION_DENIED -> UNAUTHORIZED, INVALID_ARGUMENT
  // -> MALFORMED_AUTH_TOKEN, DEADLINE_EXCEEDED -> EXPIRED_AUTH_TOKEN.
  virtual absl::Status Authorize(AuthOp op, const TrackNamespace& ns,
                                 absl::Span<const AuthToken> tokens) const = 0;
};

// The draft-14 request error code for an Authorize refusal.
uint64_t AuthErrorCode(const absl::Status& refusal);

// The AUTHORIZATION TOKEN parameter (type 0x03) carrying `token` (USE_VALUE).
KeyValuePair AuthTokenParameter(const AuthToken& token);

class HmacTokenAuthority : public Authorizer {
 public:
  // Token Type of kvcast tokens: 0, "negotiated out of band" (the draft's
  // registry has no entry yet); the value starts with a magic.
  static constexpr uint64_t kTokenType = 0;
  static constexpr size_t kMinKeyBytes = 32;

  // Keys: the first signs, every one verifies (rotation: add the new key
  // as a second line everywhere, then move it first, then drop the old).
  // INVALID_ARGUMENT for no key or a key shorter than kMinKeyBytes.
  static absl::StatusOr<std::shared_ptr<HmacTokenAuthority>> Create(
      std::vector<std::string> keys);
  // One key per non-empty line (trailing whitespace ignored).
  static absl::StatusOr<std::shared_ptr<HmacTokenAuthority>> FromFile(const std::string& path);

  // A token granting `ops` on every namespace with the tuple prefix `prefix`
  // (1..32 elements) until `expiry`.
  AuthToken Mint(const TrackNamespace& prefix, uint8_t ops, absl::Time expiry) const;
  KeyValuePair MintParameter(const TrackNamespace& prefix, uint8_t ops, absl::Time expiry) const {
    return AuthTokenParameter(Mint(prefix, ops, expiry));
  }

  absl::Status Authorize(AuthOp op, const TrackNamespace& ns,
                         absl::Span<const AuthToken> tokens) const override;

  // Tests: the clock Authorize compares expiries with.
  void SetClockForTest(std::function<absl::Time()> now) { now_ = std::move(now); }

  struct Stats {
    uint64_t allowed = 0;
    uint64_t unauthorized = 0;  // missing token, bad signature, wrong scope or op
    uint64_t malformed = 0;
    uint64_t expired = 0;
  };
  Stats stats() const;

 private:
  explicit HmacTokenAuthority(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  // One token's verdict (OK, or the refusal Authorize would give).
  absl::Status Check(AuthOp op, const TrackNamespace& ns, const AuthToken& token) const;

  std::vector<std::string> keys_;
  std::function<absl::Time()> now_ = [] { return absl::Now(); };
  mutable std::atomic<uint64_t> allowed_{0}, unauthorized_{0}, malformed_{0}, expired_{0};
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_AUTHORIZATION_H_
