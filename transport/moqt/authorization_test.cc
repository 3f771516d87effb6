#include "transport/moqt/authorization.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"
#include "transport/moqt/codec.h"

namespace kvcast::moqt {
namespace {

const std::string kKeyA(40, 'a');
const std::string kKeyB(32, 'b');
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);
const TrackNamespace kPrompt = {"moq://kvcache.moq.arpa/v1/", "model", "digest1"};

std::shared_ptr<HmacTokenAuthority> Authority(std::vector<std::string> keys) {
  auto a = HmacTokenAuthority::Create(std::move(keys));
  EXPECT_TRUE(a.ok()) << a.status();
  (*a)->SetClockForTest([] { return kNow; });
  return *a;
}

TEST(AuthTokenCodec, RoundTripsEveryAliasType) {
  for (AuthAliasType t : {AuthAliasType::kDelete, AuthAliasType::kRegister,
                          AuthAliasType::kUseAlias, AuthAliasType::kUseValue}) {
    AuthToken token;
    token.alias_type = t;
    if (t != AuthAliasType::kUseValue) token.alias = 300;
    if (t == AuthAliasType::kRegister || t == AuthAliasType::kUseValue) {
      token.token_type = 5;
      token.value = std::string("v\0lue", 5);
    }
    auto parsed = ParseAuthToken(SerializeAuthToken(token));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, token);
  }
  // Wire bytes of USE_VALUE, type 0, value "xy": 03 00 'x' 'y'.
  AuthToken v{AuthAliasType::kUseValue, 0, 0, "xy"};
  EXPECT_EQ(SerializeAuthToken(v), std::string("\x03\x00xy", 4));
}

TEST(AuthTokenCodec, UndecodableTokensAreKeyValueFormattingErrors) {
  for (std::string bad : {std::string(), std::string("\x04\x00", 2), std::string("\x01", 1),
                          std::string("\x02", 1), std::string("\x02\x01x", 3),
                          std::string("\x03", 1)}) {
    auto parsed = ParseAuthToken(bad);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(TerminationCodeOf(parsed.status()), TerminationCode::kKeyValueFormattingError);
  }
}

TEST(HmacTokenAuthority, GrantsExactlyItsOperationsPrefixAndLifetime) {
  auto auth = Authority({kKeyA});
  AuthToken token = auth->Mint(kPrompt, kAuthRead, kNow + absl::Minutes(5));
  EXPECT_TRUE(auth->Authorize(kAuthSubscribe, kPrompt, {token}).ok());
  EXPECT_TRUE(auth->Authorize(kAuthFetch, kPrompt, {token}).ok());
  // A longer namespace under the prefix is covered.
  TrackNamespace deeper = kPrompt;
  deeper.push_back("x");
  EXPECT_TRUE(auth->Authorize(kAuthTrackStatus, deeper, {token}).ok());

  absl::Status other = auth->Authorize(kAuthSubscribe, {kPrompt[0], "model", "digest2"}, {token});
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied) << other;
  EXPECT_EQ(AuthErrorCode(other), kErrUnauthorized);
  absl::Status publish = auth->Authorize(kAuthPublishNamespace, kPrompt, {token});
  EXPECT_EQ(AuthErrorCode(publish), kErrUnauthorized) << publish;
  EXPECT_NE(std::string(publish.message()).find("PUBLISH_NAMESPACE"), std::string::npos);
  // The parent namespace is not under the prefix.
  EXPECT_FALSE(auth->Authorize(kAuthSubscribe, {kPrompt[0], "model"}, {token}).ok());

  auth->SetClockForTest([] { return kNow + absl::Minutes(5); });
  absl::Status expired = auth->Authorize(kAuthSubscribe, kPrompt, {token});
  EXPECT_EQ(AuthErrorCode(expired), kErrExpiredAuthToken) << expired;

  HmacTokenAuthority::Stats st = auth->stats();
  EXPECT_EQ(st.allowed, 3u);
  EXPECT_EQ(st.unauthorized, 3u);
  EXPECT_EQ(st.expired, 1u);
}

TEST(HmacTokenAuthority, RefusesForgedTamperedMissingAndMalformedTokens) {
  auto auth = Authority({kKeyA});
  auto stranger = Authority({kKeyB});
  AuthToken token = auth->Mint(kPrompt, kAuthRead, kNow + absl::Minutes(5));

  EXPECT_EQ(AuthErrorCode(stranger->Authorize(kAuthSubscribe, kPrompt, {token})),
            kErrUnauthorized);
  // Any changed byte (here: the ops byte widened to every operation, and the
  // namespace's last byte) breaks the signature.
  AuthToken widened = token;
  widened.value[4] = static_cast<char>(0xff);
  EXPECT_EQ(auth->Authorize(kAuthPublishNamespace, kPrompt, {widened}).message(),
            "token signature does not verify");
  AuthToken renamed = token;
  renamed.value[renamed.value.size() - 33] ^= 1;
  EXPECT_FALSE(auth->Authorize(kAuthSubscribe, {kPrompt[0], "model", "digest0"}, {renamed}).ok());

  absl::Status none = auth->Authorize(kAuthSubscribe, kPrompt, {});
  EXPECT_EQ(AuthErrorCode(none), kErrUnauthorized);
  EXPECT_NE(std::string(none.message()).find("no AUTHORIZATION TOKEN"), std::string::npos);

  for (std::string junk : {std::string("kvt1"), std::string(80, 'z'),
                           token.value.substr(0, token.value.size() - 1), token.value + "!"}) {
    AuthToken bad = token;
    bad.value = junk;
    EXPECT_EQ(AuthErrorCode(auth->Authorize(kAuthSubscribe, kPrompt, {bad})),
              kErrMalformedAuthToken)
        << junk.size();
  }
  AuthToken other_type = token;
  other_type.token_type = 7;
  EXPECT_EQ(AuthErrorCode(auth->Authorize(kAuthSubscribe, kPrompt, {other_type})),
            kErrMalformedAuthToken);
  // One good token among several suffices.
  EXPECT_TRUE(auth->Authorize(kAuthSubscribe, kPrompt, {other_type, token}).ok());
}

TEST(HmacTokenAuthority, RotatesKeysAndReadsKeyFiles) {
  auto old_auth = Authority({kKeyA});
  auto rotated = Authority({kKeyB, kKeyA});
  AuthToken old_token = old_auth->Mint(kPrompt, kAuthFetch, kNow + absl::Seconds(1));
  EXPECT_TRUE(rotated->Authorize(kAuthFetch, kPrompt, {old_token}).ok());
  AuthToken new_token = rotated->Mint(kPrompt, kAuthFetch, kNow + absl::Seconds(1));
  EXPECT_FALSE(old_auth->Authorize(kAuthFetch, kPrompt, {new_token}).ok());

  EXPECT_FALSE(HmacTokenAuthority::Create({}).ok());
  absl::Status short_key = HmacTokenAuthority::Create({"short"}).status();
  EXPECT_EQ(short_key.code(), absl::StatusCode::kInvalidArgument);

  std::string path = std::string(getenv("TEST_TMPDIR")) + "/moqt.key";
  std::ofstream(path) << std::string(64, 'f') << "\n\n" << kKeyA << "  \n";
  auto from_file = HmacTokenAuthority::FromFile(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  (*from_file)->SetClockForTest([] { return kNow; });
  EXPECT_TRUE((*from_file)->Authorize(kAuthFetch, kPrompt, {old_token}).ok());
  EXPECT_EQ(HmacTokenAuthority::FromFile(path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(path) << "tooshort\n";
  EXPECT_NE(std::string(HmacTokenAuthority::FromFile(path).status().message()).find(path),
            std::string::npos);
}

}  // namespace
}  // namespace kvcast::moqt
