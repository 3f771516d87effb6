#include "transport/moqt/messages.h"

#include <set>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace kvcast::moqt {
namespace {

TEST(IsNamespacePrefixTest, TupleWise) {
  const TrackNamespace ns = {"example.com", "meeting=123", "participant=100"};
  EXPECT_TRUE(IsNamespacePrefix({}, ns));
  EXPECT_TRUE(IsNamespacePrefix({"example.com"}, ns));
  EXPECT_TRUE(IsNamespacePrefix({"example.com", "meeting=123"}, ns));
  EXPECT_TRUE(IsNamespacePrefix(ns, ns));
  // Byte prefixes of an element are not tuple prefixes.
  EXPECT_FALSE(IsNamespacePrefix({"example"}, ns));
  EXPECT_FALSE(IsNamespacePrefix({"example.com", "meeting=12"}, ns));
  EXPECT_FALSE(IsNamespacePrefix({"meeting=123"}, ns));
  TrackNamespace longer = ns;
  longer.push_back("x");
  EXPECT_FALSE(IsNamespacePrefix(longer, ns));
  EXPECT_FALSE(IsNamespacePrefix({"a"}, {}));
}

TEST(ToStringTest, NamespaceAndTrack) {
  EXPECT_EQ(ToString(TrackNamespace{"a", "b", "c"}), "a/b/c");
  EXPECT_EQ(ToString(TrackNamespace{}), "");
  EXPECT_EQ(ToString(FullTrackName{{"kv", "model"}, "chunk-7"}), "kv/model:chunk-7");
}

TEST(ToStringTest, EscapesNonPrintableAndSeparators) {
  EXPECT_EQ(ToString(TrackNamespace{std::string("a\0b", 3), "x/y", "\\", "p:q"}),
            "a\\x00b/x\\x2fy/\\x5c/p\\x3aq");
  EXPECT_EQ(ToString(FullTrackName{{"n"}, "t\n\xff:"}), "n:t\\x0a\\xff:");
}

TEST(FindIntParameterTest, FirstEvenMatch) {
  Parameters params = {{kParamAuthorizationToken, 0, "tok"},
                       {kParamDeliveryTimeout, 500, ""},
                       {kParamDeliveryTimeout, 900, ""}};
  EXPECT_EQ(FindIntParameter(params, kParamDeliveryTimeout), 500u);
  EXPECT_EQ(FindIntParameter(params, kParamMaxCacheDuration), std::nullopt);
  // Odd types carry bytes, never an integer.
  EXPECT_EQ(FindIntParameter(params, kParamAuthorizationToken), std::nullopt);
  EXPECT_EQ(FindIntParameter({}, 2), std::nullopt);
}

template <size_t I = 0>
void CollectTypes(std::vector<std::pair<uint64_t, std::string>>* out) {
  if constexpr (I < std::variant_size_v<ControlMessage>) {
    ControlMessage msg{std::in_place_index<I>};
    out->emplace_back(MessageType(msg), MessageName(msg));
    CollectTypes<I + 1>(out);
  }
}

TEST(MessageTypeTest, Draft14Codes) {
  std::vector<std::pair<uint64_t, std::string>> got;
  CollectTypes(&got);
  // In ControlMessage's alternative order; values from the draft-14
  // "Control Messages" table.
  const std::vector<std::pair<uint64_t, std::string>> want = {
      {0x20, "CLIENT_SETUP"},
      {0x21, "SERVER_SETUP"},
      {0x10, "GOAWAY"},
      {0x15, "MAX_REQUEST_ID"},
      {0x1A, "REQUESTS_BLOCKED"},
      {0x3, "SUBSCRIBE"},
      {0x4, "SUBSCRIBE_OK"},
      {0x5, "SUBSCRIBE_ERROR"},
      {0x2, "SUBSCRIBE_UPDATE"},
      {0xA, "UNSUBSCRIBE"},
      {0xB, "PUBLISH_DONE"},
      {0x1D, "PUBLISH"},
      {0x1E, "PUBLISH_OK"},
      {0x1F, "PUBLISH_ERROR"},
      {0x16, "FETCH"},
      {0x18, "FETCH_OK"},
      {0x19, "FETCH_ERROR"},
      {0x17, "FETCH_CANCEL"},
      {0xD, "TRACK_STATUS"},
      {0xE, "TRACK_STATUS_OK"},
      {0xF, "TRACK_STATUS_ERROR"},
      {0x6, "PUBLISH_NAMESPACE"},
      {0x7, "PUBLISH_NAMESPACE_OK"},
      {0x8, "PUBLISH_NAMESPACE_ERROR"},
      {0x9, "PUBLISH_NAMESPACE_DONE"},
      {0xC, "PUBLISH_NAMESPACE_CANCEL"},
      {0x11, "SUBSCRIBE_NAMESPACE"},
      {0x12, "SUBSCRIBE_NAMESPACE_OK"},
      {0x13, "SUBSCRIBE_NAMESPACE_ERROR"},
      {0x14, "UNSUBSCRIBE_NAMESPACE"},
  };
  EXPECT_EQ(got, want);
}

TEST(EnumValuesTest, MatchDraft14Tables) {
  // Session Termination Error Codes.
  EXPECT_EQ(static_cast<uint64_t>(TerminationCode::kProtocolViolation), 0x3u);
  EXPECT_EQ(static_cast<uint64_t>(TerminationCode::kKeyValueFormattingError), 0x6u);
  EXPECT_EQ(static_cast<uint64_t>(TerminationCode::kGoawayTimeout), 0x10u);
  EXPECT_EQ(static_cast<uint64_t>(TerminationCode::kVersionNegotiationFailed), 0x15u);
  EXPECT_EQ(static_cast<uint64_t>(TerminationCode::kMalformedAuthority), 0x1Au);
  // Request errors, PUBLISH_DONE, filters, statuses, parameters.
  EXPECT_EQ(kErrInvalidJoiningRequestId, 0x7u);
  EXPECT_EQ(kErrMalformedAuthToken, 0x10u);
  EXPECT_EQ(kErrExpiredAuthToken, 0x12u);
  EXPECT_EQ(kDoneMalformedTrack, 0x7u);
  EXPECT_EQ(static_cast<uint64_t>(FilterType::kAbsoluteRange), 0x4u);
  EXPECT_EQ(static_cast<uint64_t>(ObjectStatus::kEndOfGroup), 0x3u);
  EXPECT_EQ(static_cast<uint64_t>(ObjectStatus::kEndOfTrack), 0x4u);
  EXPECT_EQ(kSetupAuthority, 0x5u);
  EXPECT_EQ(kParamMaxCacheDuration, 0x4u);
  EXPECT_EQ(kVersionDraft14, 0xff00000eu);
}

}  // namespace
}  // namespace kvcast::moqt
