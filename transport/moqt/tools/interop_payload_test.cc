#include "transport/moqt/tools/interop_payload.h"

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"

namespace kvcast::moqt {
namespace {

// Vectors printed by `python3 tests/interop/payloads.py` (hashlib).
TEST(InteropPayloadTest, MatchesPythonVectors) {
  EXPECT_EQ(InteropPayload(0, 0, 0, 0), "");
  EXPECT_EQ(absl::BytesToHexString(InteropPayload(7, 0, 0, 32)), "12f1eec8d25848377434b5c639b72983fa06d9076c8bcfbbf4d5d43cb444d0d6");
  EXPECT_EQ(absl::BytesToHexString(InteropPayload(7, 0, 1, 40)), "2c562a4f0befdcc4461445b108a07f0877b3743e9b48ad81fa64de7b7ee715c32a5e929949c0f057");
  EXPECT_EQ(absl::BytesToHexString(InteropPayload(12345678901234567890ull, 99, 12, 33)),
            "51f4309cf3add7d825fb5077c051d369a317af625ef455d958692cecc1ae110ec1");
}

}  // namespace
}  // namespace kvcast::moqt
