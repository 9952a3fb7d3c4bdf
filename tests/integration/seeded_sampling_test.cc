// Seeded sampling is reproducible whatever the batch: randomness is keyed by
// (request seed, step, node), so a seeded request at temperature 0.8 streams
// the same token ids alone and inside a batch of 8 concurrent requests (other
// prompts, seeds, drafters and verification rules), for multi-round
// speculative sampling, target sampling and plain sampling. Different seeds
// give different outputs.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

constexpr int kMaxTokens = 32;
constexpr int kBatch = 8;
constexpr int kProbe = 3;  // position of the probed request inside the batch

v1::GenerateRequest Sampled(int prompt, uint64_t seed, const std::string& drafter,
                            v1::VerificationMode mode, const std::string& tree = "3,2,2,1,1",
                            float temperature = 0.8f) {
  v1::GenerateRequest r =
      MakeRequest(TestPrompt(prompt, 5 + prompt % 3), kMaxTokens, drafter, tree);
  r.mutable_sampling()->set_temperature(temperature);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_speculation()->set_verification(mode);
  return r;
}

struct Case {
  std::string name;
  std::string drafter;
  v1::VerificationMode mode;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SeededSamplingTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.garbage = false;
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static Cluster* cluster_;
};

Cluster* SeededSamplingTest::cluster_ = nullptr;

TEST_P(SeededSamplingTest, SameIdsAloneAndInsideABatchOfEight) {
  const Case& c = GetParam();
  const v1::GenerateRequest probe = Sampled(1, 1234, c.drafter, c.mode);
  GenerateResult alone = cluster_->Generate(probe);
  ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
  ASSERT_EQ(alone.ids.size(), static_cast<size_t>(kMaxTokens));
  ASSERT_TRUE(alone.has_final);
  EXPECT_EQ(alone.final_chunk.speculation().fallback_steps(), 0);

  // The batch: the probe among requests that differ in every other respect.
  const std::vector<std::string> drafters = {"mamba", "self", "ngram", "none"};
  const std::vector<v1::VerificationMode> modes = {v1::VERIFICATION_MODE_MULTIROUND,
                                                   v1::VERIFICATION_MODE_TARGET_SAMPLING,
                                                   v1::VERIFICATION_MODE_UNSPECIFIED};
  const std::vector<std::string> trees = {"chain:4", "3,3,2,1", "2,2,2,2", "auto"};
  std::vector<v1::GenerateRequest> batch;
  for (int i = 0; i < kBatch; ++i) {
    if (i == kProbe) {
      batch.push_back(probe);
      continue;
    }
    const std::string& d = drafters[i % drafters.size()];
    batch.push_back(
        Sampled(10 + i, 77 + i, d,
                d == "none" ? v1::VERIFICATION_MODE_UNSPECIFIED : modes[i % modes.size()],
                trees[i % trees.size()]));
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<GenerateResult> rs = RunConcurrently(cluster_->stub(), batch);
    for (int i = 0; i < kBatch; ++i) {
      ASSERT_TRUE(rs[i].status.ok()) << "request " << i << ": " << rs[i].status.error_message();
      EXPECT_EQ(rs[i].ids.size(), static_cast<size_t>(kMaxTokens)) << "request " << i;
    }
    EXPECT_EQ(rs[kProbe].ids, alone.ids) << c.name << ": batched run " << round;
  }

  // And once more alone.
  EXPECT_EQ(cluster_->Generate(probe).ids, alone.ids) << c.name << ": second run alone";
}

TEST_P(SeededSamplingTest, DifferentSeedsDiffer) {
  const Case& c = GetParam();
  GenerateResult a = cluster_->Generate(Sampled(2, 1, c.drafter, c.mode));
  GenerateResult b = cluster_->Generate(Sampled(2, 2, c.drafter, c.mode));
  GenerateResult a2 = cluster_->Generate(Sampled(2, 1, c.drafter, c.mode));
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.ids, a2.ids) << c.name << ": the same seed twice";
  EXPECT_NE(a.ids, b.ids) << c.name << ": seeds 1 and 2 gave the same " << kMaxTokens << " tokens";
}

// Draft-ahead (coordinator/step_machine.h) changes when a tree is drafted,
// never which tree: a seeded sample streams the same ids with draft-ahead on
// for sampled requests and with it off, alone and inside a batch. At
// temperature 0.2, so that some outcomes are guessed (hits) even on the
// random-weight fixtures.

TEST_P(SeededSamplingTest, SameIdsWithAndWithoutDraftAhead) {
  const Case& c = GetParam();
  std::vector<std::unique_ptr<Cluster>> clusters;
  for (bool ahead : {true, false}) {
    ClusterConfig config;
    config.garbage = false;
    config.coordinator.lane.draft_ahead = ahead ? 2 : 0;
    config.coordinator.lane.draft_ahead_sampled = ahead;
    auto cluster = Cluster::Start(config);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    clusters.push_back(std::move(*cluster));
  }
  std::vector<v1::GenerateRequest> batch;
  for (int i = 0; i < 4; ++i) {
    batch.push_back(Sampled(20 + i, 500 + i, c.drafter, c.mode, "3,2,2,1,1", 0.2f));
  }
  const GenerateResult with = clusters[0]->Generate(batch[0]);
  const GenerateResult without = clusters[1]->Generate(batch[0]);
  ASSERT_TRUE(with.status.ok()) << with.status.error_message();
  ASSERT_TRUE(without.status.ok()) << without.status.error_message();
  EXPECT_EQ(with.ids, without.ids) << c.name << ": alone";
  EXPECT_EQ(without.final_chunk.speculation().draft_ahead_steps(), 0);
  if (c.drafter == "mamba" || c.drafter == "self") {
    EXPECT_GT(with.final_chunk.speculation().draft_ahead_steps(), 0)
        << c.name << ": candidates were asked for";
  }
  std::vector<GenerateResult> a = RunConcurrently(clusters[0]->stub(), batch);
  std::vector<GenerateResult> b = RunConcurrently(clusters[1]->stub(), batch);
  int hits = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE(a[i].status.ok()) << "request " << i << ": " << a[i].status.error_message();
    ASSERT_TRUE(b[i].status.ok()) << "request " << i << ": " << b[i].status.error_message();
    EXPECT_EQ(a[i].ids, b[i].ids) << c.name << ": request " << i << " in a batch";
    hits += a[i].final_chunk.speculation().draft_ahead_hits();
  }
  EXPECT_EQ(a[0].ids, with.ids) << c.name << ": batched and alone";
  std::printf("%s: %d draft-ahead hits in the batch\n", c.name.c_str(), hits);
  // The target drafting for itself guesses some sampled outcomes (10 of the
  // batch's steps when written); the fixture mamba model rarely does.
  if (c.drafter == "self") EXPECT_GT(hits, 0) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SeededSamplingTest,
    ::testing::Values(Case{"mamba_multiround", "mamba", v1::VERIFICATION_MODE_MULTIROUND},
                      Case{"mamba_target_sampling", "mamba", v1::VERIFICATION_MODE_TARGET_SAMPLING},
                      Case{"self_multiround", "self", v1::VERIFICATION_MODE_MULTIROUND},
                      // ngram trees carry no q: nodes fall back to target sampling.
                      Case{"ngram_multiround", "ngram", v1::VERIFICATION_MODE_MULTIROUND},
                      Case{"plain", "none", v1::VERIFICATION_MODE_UNSPECIFIED}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace treespec::testing
