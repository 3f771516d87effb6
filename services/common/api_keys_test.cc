#include "services/common/api_keys.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

using ::testing::HasSubstr;

TEST(ApiKeysTest, MapsBearerKeysToTenants) {
  auto keys = ApiKeys::Parse(
      "# comment\n\nalice-key-0123456789 alice\n  mallory-key-0123456789\tmallory  \n", "keys");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(keys->TenantOf("Bearer alice-key-0123456789"), "alice");
  EXPECT_EQ(keys->TenantOf("bearer   mallory-key-0123456789 "), "mallory");
  EXPECT_EQ(keys->TenantOf("Bearer alice-key-012345678"), std::nullopt);
  EXPECT_EQ(keys->TenantOf("alice-key-0123456789"), std::nullopt);
  EXPECT_EQ(keys->TenantOf(""), std::nullopt);
  EXPECT_FALSE(ApiKeys().enabled());
}

TEST(ApiKeysTest, RejectsMalformedFilesNamingTheLine) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"only-one-field-0123456\n", "keys:1: expected `KEY TENANT`"},
      {"\nshort t\n", "keys:2: keys must be at least 16"},
      {"aaaaaaaaaaaaaaaa a\naaaaaaaaaaaaaaaa b\n", "keys:2: this key is listed twice"},
      {"# nothing\n", "keys: no API keys"},
      {"k\x01kkkkkkkkkkkkkkkk t\n", "printable ASCII"},
  };
  for (const Case& c : cases) {
    auto keys = ApiKeys::Parse(c.text, "keys");
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(keys.status().message()), HasSubstr(c.error));
  }
  EXPECT_EQ(ApiKeys::Load("/nonexistent/keys").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvcast::services
