// Authorizer and HmacTokenAuthority: see authorization.h.
#include "transport/moqt/authorization.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "transport/moqt/codec.h"

namespace kvcast::moqt {
namespace {

// Token Value: magic (4) | ops (1) | expiry, Unix seconds (8, big-endian) |
// prefix element count (1) | per element: length (2, big-endian) + bytes |
// HMAC-SHA256 of everything before it under the key (32).
constexpr char kMagic[] = "kvt1";
constexpr size_t kMagicBytes = 4;
constexpr size_t kTagBytes = 32;

void PutBigEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetBigEndian(absl::string_view s) {
  uint64_t v = 0;
  for (unsigned char c : s) v = (v << 8) | c;
  return v;
}

std::string HmacSha256(const std::string& key, absl::string_view data) {
  std::string tag(kTagBytes, '\0');
  gnutls_hmac_fast(GNUTLS_MAC_SHA256, key.data(), key.size(), data.data(), data.size(),
                   tag.data());
  return tag;
}

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct TokenFields {
  uint8_t ops = 0;
  int64_t expiry_s = 0;
  TrackNamespace prefix;
  size_t signed_bytes = 0;  // where the tag starts
};

absl::StatusOr<TokenFields> ParseValue(absl::string_view v) {
  auto malformed = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed kvcast token: ", why));
  };
  if (v.size() < kMagicBytes + 1 + 8 + 1 + kTagBytes || v.substr(0, kMagicBytes) != kMagic) {
    return malformed("not a kvt1 token");
  }
  TokenFields f;
  size_t at = kMagicBytes;
  f.ops = static_cast<uint8_t>(v[at++]);
  f.expiry_s = static_cast<int64_t>(GetBigEndian(v.substr(at, 8)));
  at += 8;
  size_t count = static_cast<uint8_t>(v[at++]);
  if (count < 1 || count > 32) return malformed("namespace prefix of 0 or > 32 elements");
  for (size_t i = 0; i < count; ++i) {
    if (v.size() < at + 2 + kTagBytes) return malformed("truncated namespace prefix");
    size_t len = GetBigEndian(v.substr(at, 2));
    at += 2;
    if (v.size() < at + len + kTagBytes) return malformed("truncated namespace prefix");
    f.prefix.emplace_back(v.substr(at, len));
    at += len;
  }
  if (v.size() != at + kTagBytes) return malformed("bytes after the signature");
  f.signed_bytes = at;
  return f;
}

}  // namespace

const char* AuthOpName(AuthOp op) {
  switch (op) {
    case kAuthPublishNamespace: return "PUBLISH_NAMESPACE";
    case kAuthSubscribe: return "SUBSCRIBE";
    case kAuthFetch: return "FETCH";
    case kAuthTrackStatus: return "TRACK_STATUS";
    case kAuthSubscribeNamespace: return "SUBSCRIBE_NAMESPACE";
    case kAuthPublish: return "PUBLISH";
  }
  return "?";
}

uint64_t AuthErrorCode(const absl::Status& refusal) {
  switch (refusal.code()) {
    case absl::StatusCode::kInvalidArgument: return kErrMalformedAuthToken;
    case absl::StatusCode::kDeadlineExceeded: return kErrExpiredAuthToken;
    default: return kErrUnauthorized;
  }
}

KeyValuePair AuthTokenParameter(const AuthToken& token) {
  return KeyValuePair{kParamAuthorizationToken, 0, SerializeAuthToken(token)};
}

absl::StatusOr<std::shared_ptr<HmacTokenAuthority>> HmacTokenAuthority::Create(
    std::vector<std::string> keys) {
  if (keys.empty()) return absl::InvalidArgumentError("no MoQT authorization key");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].size() < kMinKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("MoQT authorization key ", i + 1, " has ",
                                                     keys[i].size(), " bytes; at least ",
                                                     kMinKeyBytes, " are needed"));
    }
  }
  return std::shared_ptr<HmacTokenAuthority>(new HmacTokenAuthority(std::move(keys)));
}

absl::StatusOr<std::shared_ptr<HmacTokenAuthority>> HmacTokenAuthority::FromFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read MoQT key file ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (!line.empty()) keys.emplace_back(line);
  }
  auto authority = Create(std::move(keys));
  if (!authority.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", authority.status().message()));
  }
  return authority;
}

AuthToken HmacTokenAuthority::Mint(const TrackNamespace& prefix, uint8_t ops,
                                   absl::Time expiry) const {
  std::string v(kMagic, kMagicBytes);
  v.push_back(static_cast<char>(ops));
  PutBigEndian(static_cast<uint64_t>(absl::ToUnixSeconds(expiry)), 8, &v);
  v.push_back(static_cast<char>(prefix.size()));
  for (const std::string& element : prefix) {
    PutBigEndian(element.size(), 2, &v);
    v += element;
  }
  v += HmacSha256(keys_.front(), v);
  AuthToken token;
  token.alias_type = AuthAliasType::kUseValue;
  token.token_type = kTokenType;
  token.value = std::move(v);
  return token;
}

absl::Status HmacTokenAuthority::Check(AuthOp op, const TrackNamespace& ns,
                                       const AuthToken& token) const {
  if (token.token_type != kTokenType) {
    return absl::InvalidArgumentError(
        absl::StrCat("token type ", token.token_type, " is not kvcast's (", kTokenType, ")"));
  }
  auto fields = ParseValue(token.value);
  if (!fields.ok()) return fields.status();
  absl::string_view signed_part = absl::string_view(token.value).substr(0, fields->signed_bytes);
  absl::string_view tag = absl::string_view(token.value).substr(fields->signed_bytes);
  bool verified = false;
  for (const std::string& key : keys_) verified |= ConstantTimeEqual(HmacSha256(key, signed_part), tag);
  if (!verified) return absl::PermissionDeniedError("token signature does not verify");
  if (absl::FromUnixSeconds(fields->expiry_s) <= now_()) {
    return absl::DeadlineExceededError(
        absl::StrCat("token expired at ", absl::FormatTime(absl::FromUnixSeconds(fields->expiry_s))));
  }
  if ((fields->ops & op) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("token does not grant ", AuthOpName(op)));
  }
  if (!IsNamespacePrefix(fields->prefix, ns)) {
    return absl::PermissionDeniedError(absl::StrCat("token is for ", ToString(fields->prefix),
                                                    ", not ", ToString(ns)));
  }
  return absl::OkStatus();
}

absl::Status HmacTokenAuthority::Authorize(AuthOp op, const TrackNamespace& ns,
                                           absl::Span<const AuthToken> tokens) const {
  absl::Status first = absl::PermissionDeniedError(
      absl::StrCat(AuthOpName(op), " of ", ToString(ns), " carries no AUTHORIZATION TOKEN"));
  for (size_t i = 0; i < tokens.size(); ++i) {
    absl::Status s = Check(op, ns, tokens[i]);
    if (s.ok()) {
      allowed_.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
    if (i == 0) first = s;
  }
  switch (AuthErrorCode(first)) {
    case kErrMalformedAuthToken: malformed_.fetch_add(1, std::memory_order_relaxed); break;
    case kErrExpiredAuthToken: expired_.fetch_add(1, std::memory_order_relaxed); break;
    default: unauthorized_.fetch_add(1, std::memory_order_relaxed); break;
  }
  return first;
}

HmacTokenAuthority::Stats HmacTokenAuthority::stats() const {
  return Stats{allowed_.load(), unauthorized_.load(), malformed_.load(), expired_.load()};
}

}  // namespace kvcast::moqt
