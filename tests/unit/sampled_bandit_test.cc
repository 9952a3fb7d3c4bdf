// SampledShapeBandit (core/spec/sampled_bandit.h): plain decoding is an arm,
// rewards charge the modelled step cost, and the choice converges to plain
// for a useless drafter and keeps speculating for a good one.
#include "core/spec/sampled_bandit.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

TreeShape Shape(const char* text) {
  absl::StatusOr<TreeShape> s = TreeShape::Parse(text);
  EXPECT_TRUE(s.ok()) << text;
  return *s;
}

// The coordinator's default --bandit_trees.
std::vector<TreeShape> DefaultShapes() {
  std::vector<TreeShape> out;
  for (const char* t : {"chain:1", "chain:2", "chain:3", "chain:4", "chain:6", "2,1,1", "2,2,1,1",
                        "3,2,2,1,1", "3,3,2,1", "2,2,2,2", "4,2,1"}) {
    out.push_back(Shape(t));
  }
  return out;
}

TEST(SampledBanditTest, OptionsAreValidated) {
  EXPECT_TRUE(SampledBanditOptions{}.Validate().ok());
  EXPECT_THAT(std::string(SampledBanditOptions{-1.0, 0.5, 1.0}.Validate().message()),
              HasSubstr("explore"));
  EXPECT_THAT(std::string(SampledBanditOptions{0.1, NAN, 1.0}.Validate().message()),
              HasSubstr("prior_accepted"));
  EXPECT_THAT(std::string(SampledBanditOptions{0.1, 3.0, 1.0}.Validate().message()),
              HasSubstr("prior_trials"));
  EXPECT_EQ(SampledShapeBandit::Create({}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SampledBanditTest, CostChargesNodesDepthAndTheDrafterCall) {
  StepCostRatios c;
  c.per_draft_node = 0.1;
  c.draft_call = 0.2;
  c.per_level = 0.05;
  c.per_draft_node_drafting = 0.01;
  // 3,2: 3 + 6 draft nodes, depth 2.
  EXPECT_NEAR(c.Cost(Shape("3,2")), 1.0 + 0.11 * 9 + 0.2 + 0.1, 1e-12);
  c.knee_tokens = 8;
  c.per_node_past_knee = 0.5;
  EXPECT_NEAR(c.Cost(Shape("3,2")), 1.0 + 0.11 * 9 + 0.2 + 0.1 + 0.5 * 2, 1e-12);
}

TEST(SampledBanditTest, CostRatiosComeFromTheProfiles) {
  VerifyCostModel::Coefficients v;
  v.per_step = 0.006;
  v.per_sequence = 0.002;
  v.per_token = 0.002;  // plain step: 0.01 s
  DraftCostModel::Coefficients d;
  d.per_call = 0.003;
  d.per_level = 0.001;
  d.per_sequence_level = 0.001;
  d.per_node = 0.0005;
  StepCostRatios r = StepCostRatios::FromProfiles(*VerifyCostModel::FromCoefficients(v),
                                                  *DraftCostModel::FromCoefficients(d));
  EXPECT_NEAR(r.per_draft_node, 0.2, 1e-9);
  EXPECT_NEAR(r.draft_call, 0.3, 1e-9);
  EXPECT_NEAR(r.per_level, 0.2, 1e-9);
  EXPECT_NEAR(r.per_draft_node_drafting, 0.05, 1e-9);
  // Relative to a quarter of the step cost plus the per-sequence ones (2.5 + 2 + 2 ms).
  StepCostRatios r4 = StepCostRatios::FromProfiles(*VerifyCostModel::FromCoefficients(v),
                                                   *DraftCostModel::FromCoefficients(d), 4);
  EXPECT_NEAR(r4.per_draft_node, 0.002 / 0.0055, 1e-9);
  // One drafter call serves the whole reference batch.
  EXPECT_NEAR(r4.draft_call, 0.003 / 4 / 0.0055, 1e-9);
  // No profile: the conservative constants.
  StepCostRatios none = StepCostRatios::FromProfiles(std::nullopt, std::nullopt);
  EXPECT_EQ(none.per_draft_node, StepCostRatios{}.per_draft_node);
  EXPECT_EQ(none.draft_call, StepCostRatios{}.draft_call);
}

// The coordinator freezes the costs at the lane's largest batch. On a
// CPU-like profile, where a tree token costs as much as a sequence's share of
// a plain step, no shape pays there even if every draft were accepted, so a
// sampled sequence decodes plainly at any load; on a GPU-like profile, where
// the step's fixed cost dominates, a good drafter still speculates.
TEST(SampledBanditTest, CostsAtTheLargestBatchKeepSpeculationWhereItPays) {
  VerifyCostModel::Coefficients cpu;
  cpu.per_step = 0.0037;
  cpu.per_token = 0.00073;  // the demo target's CPU profile
  VerifyCostModel::Coefficients gpu;
  gpu.per_step = 0.008;
  gpu.per_token = 0.00002;
  gpu.knee_tokens = 256;
  gpu.per_token_past_knee = 0.00004;
  DraftCostModel::Coefficients cpu_draft;  // the mamba drafter's CPU profile
  cpu_draft.per_sequence_level = 0.000016;
  cpu_draft.per_node = 0.00011;
  DraftCostModel::Coefficients gpu_draft;
  gpu_draft.per_call = 0.0005;
  gpu_draft.per_node = 0.00001;
  SampledBanditOptions perfect{.explore = 0.0, .prior_accepted = 1.0, .prior_trials = 1.0};
  auto choice = [&](const VerifyCostModel::Coefficients& v, const DraftCostModel::Coefficients& d,
                    int batch) {
    absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(
        DefaultShapes(),
        StepCostRatios::FromProfiles(*VerifyCostModel::FromCoefficients(v),
                                     *DraftCostModel::FromCoefficients(d), batch),
        perfect);
    EXPECT_TRUE(b.ok());
    return b->Select();
  };
  EXPECT_TRUE(choice(cpu, cpu_draft, 1).has_value());    // alone, a perfect drafter pays
  EXPECT_FALSE(choice(cpu, cpu_draft, 64).has_value());  // but not in a step of 64
  EXPECT_TRUE(choice(gpu, gpu_draft, 64).has_value());
  // The knee is the pass's: 64 sequences reach it at 4 tokens each.
  StepCostRatios g = StepCostRatios::FromProfiles(*VerifyCostModel::FromCoefficients(gpu),
                                                  *DraftCostModel::FromCoefficients(gpu_draft), 64);
  EXPECT_EQ(g.knee_tokens, 4);
}

TEST(SampledBanditTest, ExpectedTokensFollowTheLevelModel) {
  absl::StatusOr<SampledShapeBandit> b =
      SampledShapeBandit::Create({Shape("chain:2"), Shape("2,1")}, {});
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR(b->ExpectedTokens(0, 0.5), 1 + 0.5 + 0.25, 1e-12);
  EXPECT_NEAR(b->ExpectedTokens(1, 0.5), 1 + 0.75 + 0.375, 1e-12);
  EXPECT_DOUBLE_EQ(b->ExpectedTokens(0, 0.0), 1.0);
}

// A drafter whose candidates are never accepted: after a few steps every
// choice is plain, and over a 128-token request speculation is retried only
// a handful of times (the exploration bonus grows logarithmically).
TEST(SampledBanditTest, UselessDrafterConvergesToPlain) {
  absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(DefaultShapes(), {});
  ASSERT_TRUE(b.ok());
  int first_plain = -1, speculative = 0;
  for (int step = 0; step < 128; ++step) {
    const std::optional<int> k = b->Select();
    if (k.has_value()) {
      speculative += 1;
      b->Update(*k, 0);
    } else {
      if (first_plain < 0) first_plain = step;
      b->UpdatePlain();
    }
  }
  EXPECT_GE(first_plain, 0);
  EXPECT_LE(first_plain, 3) << "plain within a few steps";
  EXPECT_LE(speculative, 6) << "of 128 steps";
  EXPECT_LE(b->acceptance(), 0.2);
}

// A drafter whose candidates are always accepted keeps speculating, with the
// deep trees.
TEST(SampledBanditTest, PerfectDrafterKeepsSpeculating) {
  absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(DefaultShapes(), {});
  ASSERT_TRUE(b.ok());
  for (int step = 0; step < 128; ++step) {
    const std::optional<int> k = b->Select();
    ASSERT_TRUE(k.has_value()) << "step " << step;
    b->Update(*k, b->arm(*k).Depth());
    if (step >= 3) EXPECT_GE(b->arm(*k).Depth(), 4) << "step " << step;
  }
  EXPECT_GT(b->acceptance(), 0.9);
}

// Simulates a drafter each of whose candidates is accepted with probability
// `alpha` (a level of fanout w passes with 1 − (1 − alpha)^w), with a fixed
// seed; returns the share of `steps` steps that speculated.
double SpeculatedShare(double alpha, int steps) {
  absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(DefaultShapes(), {});
  EXPECT_TRUE(b.ok());
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int speculative = 0;
  for (int step = 0; step < steps; ++step) {
    const std::optional<int> k = b->Select();
    if (!k.has_value()) {
      b->UpdatePlain();
      continue;
    }
    speculative += 1;
    int32_t accepted = 0;
    for (int32_t w : b->arm(*k).fanouts()) {
      if (u(rng) >= 1.0 - std::pow(1.0 - alpha, w)) break;
      accepted += 1;
    }
    b->Update(*k, accepted);
  }
  return static_cast<double>(speculative) / steps;
}

// Under the default cost constants a chain:1 step costs 1.3 plain steps, so
// speculation pays once a candidate is accepted more than ~30% of the time.
TEST(SampledBanditTest, AGoodDrafterSpeculatesAPoorOneMostlyDoesNot) {
  EXPECT_GE(SpeculatedShare(0.6, 128), 0.9);
  EXPECT_GE(SpeculatedShare(0.5, 128), 0.8);
  EXPECT_LE(SpeculatedShare(0.05, 128), 0.1);
}

TEST(SampledBanditTest, ChoicesAreAFunctionOfTheHistoryOnly) {
  absl::StatusOr<SampledShapeBandit> a = SampledShapeBandit::Create(DefaultShapes(), {});
  absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(DefaultShapes(), {});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int step = 0; step < 50; ++step) {
    const std::optional<int> ka = a->Select(), kb = b->Select();
    ASSERT_EQ(ka, kb);
    if (!ka.has_value()) {
      a->UpdatePlain();
      b->UpdatePlain();
    } else {
      a->Update(*ka, step % 3);
      b->Update(*kb, step % 3);
    }
  }
}

}  // namespace
}  // namespace treespec
