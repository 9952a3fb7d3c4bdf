// A sampled request without a seed gets a fresh random seed: three calls at
// temperature 1 do not all return the same text, and each final chunk carries
// the seed it ran with, which reproduces the completion when sent back.
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

constexpr int kMaxTokens = 24;

TEST(UnseededSamplingTest, FreshSeedPerRequestReturnedAndReproducible) {
  ClusterConfig config;
  config.self = false;
  config.garbage = false;
  auto cluster = Cluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (const char* drafter : {"none", "mamba"}) {
    v1::GenerateRequest r = MakeRequest(TestPrompt(2), kMaxTokens, drafter);
    r.mutable_sampling()->set_temperature(1.0f);
    ASSERT_FALSE(r.sampling().has_seed());
    std::set<std::vector<int32_t>> outputs;
    std::set<uint64_t> seeds;
    std::vector<GenerateResult> results;
    for (int i = 0; i < 3; ++i) {
      GenerateResult g = (*cluster)->Generate(r);
      ASSERT_TRUE(g.status.ok()) << drafter << ": " << g.status.error_message();
      ASSERT_TRUE(g.has_final && g.final_chunk.has_seed()) << drafter << ": no seed returned";
      outputs.insert(g.ids);
      seeds.insert(g.final_chunk.seed());
      results.push_back(g);
    }
    EXPECT_EQ(seeds.size(), 3u) << drafter;
    EXPECT_GT(outputs.size(), 1u) << drafter << ": three unseeded calls gave the same text";
    for (const GenerateResult& g : results) {
      v1::GenerateRequest again = r;
      again.mutable_sampling()->set_seed(g.final_chunk.seed());
      GenerateResult replay = (*cluster)->Generate(again);
      ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
      EXPECT_EQ(replay.ids, g.ids) << drafter << ": seed " << g.final_chunk.seed();
      EXPECT_EQ(replay.final_chunk.seed(), g.final_chunk.seed());
    }
  }
}

}  // namespace
}  // namespace treespec::testing
