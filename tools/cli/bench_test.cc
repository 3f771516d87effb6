#include "tools/cli/bench.h"

#include <set>

#include "gtest/gtest.h"
#include "tools/cli/client_channel.h"
#include "tools/cli/remote_generate.h"

namespace kvcast::cli {
namespace {

TEST(BenchTest, WorkloadSharesPrefixesAndIsDeterministic) {
  BenchOptions o;
  o.requests = 20;
  o.prefixes = 2;
  o.prefix_tokens = 64;
  o.suffix_tokens = 8;
  o.vocab = 100;
  auto w = MakeBenchWorkload(o);
  ASSERT_EQ(w.size(), 20u);
  std::set<std::vector<int32_t>> prefixes;
  for (const auto& p : w) {
    ASSERT_EQ(p.size(), 72u);
    for (int32_t id : p) {
      EXPECT_GE(id, 10);
      EXPECT_LT(id, 100);
    }
    prefixes.insert(std::vector<int32_t>(p.begin(), p.begin() + 64));
  }
  EXPECT_EQ(prefixes.size(), 2u);
  EXPECT_EQ(MakeBenchWorkload(o), w);
  o.seed = 2;
  EXPECT_NE(MakeBenchWorkload(o), w);
}

TEST(BenchTest, Percentile) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Percentile({3, 1, 2}, 0.99), 3);
  EXPECT_EQ(Percentile({3, 1, 2}, 0), 1);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 0.9), 90);
}

TEST(BenchTest, ValidateAndJson) {
  BenchOptions o;
  EXPECT_FALSE(ValidateBenchOptions(o).ok());  // no scheduler
  o.scheduler = "127.0.0.1:1";
  EXPECT_TRUE(ValidateBenchOptions(o).ok());
  o.vocab = 5;
  EXPECT_FALSE(ValidateBenchOptions(o).ok());
  BenchReport r;
  r.ok = 3;
  r.errors["UNAVAILABLE: x"] = 1;
  nlohmann::json j = BenchReportJson(r, o);
  EXPECT_EQ(j["requests_ok"], 3);
  EXPECT_EQ(j["errors"]["UNAVAILABLE: x"], 1);
  EXPECT_TRUE(j["ttft_ms"].contains("p99"));
}

TEST(ClientTest, TokenIdsAndRequest) {
  EXPECT_EQ(*ParseTokenIds("1, 2,3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ParseTokenIds("1,x").ok());
  EXPECT_FALSE(ParseTokenIds("").ok());
  GenerateOptions g;
  g.prompt_ids = {5, 6};
  g.max_tokens = 3;
  RemoteOptions r;
  r.stop = "\n\n";
  v1::GenerateRequest req = MakeGenerateRequest(g, r);
  EXPECT_EQ(req.token_ids().ids_size(), 2);
  EXPECT_EQ(req.max_tokens(), 3);
  EXPECT_EQ(req.stop(0), "\n\n");
  g.prompt_ids.clear();
  g.prompt = "hi";
  EXPECT_EQ(MakeGenerateRequest(g, r).text(), "hi");
}

}  // namespace
}  // namespace kvcast::cli
