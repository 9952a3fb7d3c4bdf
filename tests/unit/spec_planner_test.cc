// The lane's planner state (coordinator/spec_planner.h): start-up profiles as
// priors, and the measured check that calibrates the models' step times per
// batch size and arm.
#include "coordinator/spec_planner.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace treespec {
namespace {

// A planner whose models make chain:3 pay 2x for a batch of 4: cheap
// drafting, verify dominated by its per-step cost, drafts always accepted.
SpecPlanner PayingPlanner(int check_max_sequences = 8, int check_every = 4,
                          int plain_replan_every = 8) {
  SpecPlannerOptions o;
  o.candidates = {*TreeShape::Parse("chain:3")};
  o.probe_steps = 0;
  o.planner.explore = 0.0;
  o.check_every = check_every;
  o.check_max_sequences = check_max_sequences;
  o.plain_replan_every = plain_replan_every;
  SpecPlanner p(o);
  VerifyCostModel::Coefficients v;
  v.per_step = 10e-3;
  v.per_token = 1e-3;
  p.SetVerifyProfile(*VerifyCostModel::FromCoefficients(v));
  p.SetDraftProfile(*DraftCostModel::FromCoefficients({0.1e-3, 0.0, 0.1e-3, 0.0}));
  TokenTree chain;
  chain.parents = {-1, 0, 1, 2};
  chain.tokens = {0, 1, 2, 3};
  std::vector<TokenTree> trees(8, chain);
  std::vector<std::vector<int32_t>> paths(8, {0, 1, 2, 3});
  for (int i = 0; i < 20; ++i) p.ObserveTrees(trees, paths, /*greedy=*/true);
  return p;
}

std::vector<PlanSequence> Batch4() { return std::vector<PlanSequence>(4); }

TEST(SpecPlannerTest, ModelsAloneSpeculateWhenItPays) {
  SpecPlanner p = PayingPlanner();
  EXPECT_TRUE(p.Ready());
  auto plan = p.Plan(Batch4(), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->call_drafter);
  ASSERT_TRUE(plan->shapes[0].has_value());
  EXPECT_EQ(plan->shapes[0]->ToString(), "chain:3");
}

// The models say chain:3 pays about 2x; measured, what speculation added to
// the step took 4x its modelled time. Calibrated, plain wins, so only check
// steps speculate (planned by the uncalibrated models), ever more rarely,
// and the factor is kept per batch-size bucket.
TEST(SpecPlannerTest, TimeCalibrationTurnsSpeculationSlowerThanPredictedPlain) {
  SpecPlanner p = PayingPlanner();
  auto first = p.Plan(Batch4(), true);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->call_drafter);
  EXPECT_DOUBLE_EQ(p.time_factor(true, 4), 1.0);
  const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
  p.ObserveStepRate(4, 16, plain + 4 * added, /*speculated=*/true);
  EXPECT_NEAR(p.time_factor(true, 4), 4.0, 1e-9);
  EXPECT_NEAR(p.time_factor(true, 5), 4.0, 1e-9) << "same bucket (4-7)";
  EXPECT_NEAR(p.time_factor(true, 64), 4.0, 1e-9) << "borrowed from the nearest bucket";
  EXPECT_DOUBLE_EQ(p.time_factor(false, 4), 1.0) << "plain not measured";
  // Check steps, backing off while speculation keeps losing: 4, +8, +16,
  // +32, then every 64 (16 * check_every).
  std::vector<int> speculated;
  for (int step = 2; step <= 200; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    if (plan->call_drafter) {
      speculated.push_back(step);
      EXPECT_NEAR(plan->step_seconds, first->step_seconds, 1e-12) << "the uncalibrated plan";
      p.ObserveStepRate(4, 16, plain + 4 * added, true);
    } else {
      p.ObserveStepRate(4, 4, plain, false);
    }
  }
  EXPECT_EQ(speculated, (std::vector<int>{4, 12, 28, 60, 124, 188}));
  EXPECT_NEAR(p.time_factor(true, 4), 4.0, 1e-9);
  EXPECT_NEAR(p.time_factor(false, 4), 1.0, 1e-9);
  // A larger batch measured on its own keeps its own factor.
  std::vector<PlanSequence> batch64(64);
  auto big = p.Plan(batch64, true);
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->call_drafter) << "km 4 borrowed from batch 4";
  p.ObserveStepRate(64, 64, big->plain_seconds * 0.5, /*speculated=*/false);
  EXPECT_NEAR(p.time_factor(false, 64), 0.5, 1e-9);
  EXPECT_NEAR(p.time_factor(false, 4), 1.0, 1e-9);
  EXPECT_NEAR(p.time_factor(false, 16), 0.5, 1e-9) << "nearest measured: 64 (bucket 6 vs 2)";
}

// While plain is preferred, the shapes are searched again every
// plain_replan_every planned steps while nothing changes (plain measured as
// modelled); at once when the plain step time moves (plain measured 8x
// slower than modelled, so that chain:3 pays again), when the batch size
// changes, and after anything learned from speculation.
TEST(SpecPlannerTest, WhilePlainTheShapesAreSearchedEveryFewSteps) {
  for (int every : {1, 8}) {
    SpecPlanner p = PayingPlanner(8, /*check_every=*/0, every);
    auto first = p.Plan(Batch4(), true);
    ASSERT_TRUE(first.ok());
    ASSERT_TRUE(first->call_drafter);
    const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
    p.ObserveStepRate(4, 16, plain + 4 * added, /*speculated=*/true);  // km 4: plain wins
    for (int step = 1; step <= 24; ++step) {
      auto plan = p.Plan(Batch4(), true);
      ASSERT_TRUE(plan.ok());
      ASSERT_FALSE(plan->call_drafter) << "every " << every << ", step " << step;
      EXPECT_EQ(plan->shapes.size(), 4u);
      EXPECT_EQ(plan->expected_tokens, std::vector<double>(4, 1.0));
      p.ObserveStepRate(4, 4, plain, false);
    }
    EXPECT_EQ(p.searches(), every == 1 ? 25 : 1 + 3) << "every " << every;
    p.ObserveStepRate(4, 16, plain + 4 * added, true);  // learned: searched at once
    ASSERT_FALSE(p.Plan(Batch4(), true)->call_drafter);
    EXPECT_EQ(p.searches(), every == 1 ? 26 : 5);
    p.ObserveStepRate(4, 4, 8 * plain, false);  // kp 8: chain:3 pays again
    EXPECT_TRUE(p.Plan(Batch4(), true)->call_drafter) << "every " << every;
  }
  SpecPlanner p = PayingPlanner(8, /*check_every=*/0, /*plain_replan_every=*/8);
  auto first = p.Plan(Batch4(), true);
  ASSERT_TRUE(first.ok());
  const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
  p.ObserveStepRate(4, 16, plain + 4 * added, true);
  ASSERT_FALSE(p.Plan(Batch4(), true)->call_drafter);
  ASSERT_FALSE(p.Plan(Batch4(), true)->call_drafter);
  EXPECT_EQ(p.searches(), 2) << "the second plain step kept the first's";
  ASSERT_FALSE(p.Plan(std::vector<PlanSequence>(5), true)->call_drafter);
  EXPECT_EQ(p.searches(), 3) << "batch 5 searched";
}

// The sequences of a plan that have a tree.
std::vector<int> WithTrees(const ShapePlan& plan) {
  std::vector<int> with;
  for (size_t i = 0; i < plan.shapes.size(); ++i) {
    if (plan.shapes[i].has_value()) with.push_back(static_cast<int>(i));
  }
  return with;
}

// While plain is preferred, a check step drafts for a few sequences of a
// large batch only (4 of 16 here, a different 4 each time) and learns the
// added-time factor from what those trees added.
TEST(SpecPlannerTest, ACheckStepOfALargeBatchDraftsForAFewSequences) {
  SpecPlanner p = PayingPlanner(/*check_max_sequences=*/4);
  const std::vector<PlanSequence> batch(16);
  auto first = p.Plan(batch, true);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->call_drafter);
  for (const auto& s : first->shapes) EXPECT_TRUE(s.has_value()) << "a planned step drafts all";
  const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
  p.ObserveStepRate(16, 64, plain + 4 * added, /*speculated=*/true);
  ASSERT_NEAR(p.time_factor(true, 16), 4.0, 1e-9);
  std::vector<std::vector<int>> drafted;  // per check step, the sequences with trees
  for (int step = 2; step <= 60; ++step) {
    auto plan = p.Plan(batch, true);
    ASSERT_TRUE(plan.ok());
    if (!plan->call_drafter) {
      p.ObserveStepRate(16, 16, plain, false);
      continue;
    }
    const std::vector<int> with = WithTrees(*plan);
    drafted.push_back(with);
    // These trees added 4x their modelled time too.
    const double part = plan->step_seconds - plan->plain_seconds;
    EXPECT_LT(part, 0.5 * added) << "a quarter of the batch's trees";
    p.ObserveStepRate(16, 16 + 3 * static_cast<int64_t>(with.size()), plain + 4 * part, true);
    EXPECT_NEAR(p.time_factor(true, 16), 4.0, 1e-9) << "step " << step;
  }
  ASSERT_GE(drafted.size(), 2u);
  for (const std::vector<int>& with : drafted) EXPECT_EQ(with.size(), 4u);
  EXPECT_NE(drafted[0], drafted[1]) << "the checked sequences move";
}

// The check drafts for the sequences whose drafter is least behind: a long
// backlog fed with the check's Draft call would be timed as the trees' cost.
TEST(SpecPlannerTest, ACheckDraftsForTheSequencesLeastBehind) {
  SpecPlanner p = PayingPlanner(/*check_max_sequences=*/4);
  std::vector<PlanSequence> batch(16);
  auto first = p.Plan(batch, true);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->call_drafter);
  const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
  p.ObserveStepRate(16, 64, plain + 4 * added, /*speculated=*/true);
  for (int i = 0; i < 16; ++i) batch[i].draft_backlog = i == 3 || i == 9 ? 0 : 100 + i;
  for (int step = 2; step <= 20; ++step) {
    auto plan = p.Plan(batch, true);
    ASSERT_TRUE(plan.ok());
    if (!plan->call_drafter) {
      p.ObserveStepRate(16, 16, plain, false);
      continue;
    }
    // Backlogs 0, 0, 100, 101: sequences 3, 9, 0, 1.
    EXPECT_EQ(WithTrees(*plan), (std::vector<int>{0, 1, 3, 9})) << "step " << step;
    return;
  }
  FAIL() << "no check step";
}

// Speculation that loses backs the checks off; once measured to pay again,
// the checks return to every check_every steps.
TEST(SpecPlannerTest, CheckBackoffEndsWhenSpeculationPaysAgain) {
  SpecPlanner p = PayingPlanner();
  auto first = p.Plan(Batch4(), true);
  ASSERT_TRUE(first.ok());
  const double plain = first->plain_seconds, added = first->step_seconds - first->plain_seconds;
  p.ObserveStepRate(4, 16, plain + 4 * added, true);
  std::vector<int> speculated;
  for (int step = 2; step <= 40; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    if (!plan->call_drafter) {
      p.ObserveStepRate(4, 4, plain, false);
      continue;
    }
    speculated.push_back(step);
    // From step 12 on, speculation adds a quarter of its modelled time.
    p.ObserveStepRate(4, 16, step < 12 ? plain + 4 * added : plain + 0.25 * added, true);
  }
  // Break-even is km of about 2.8. Checks at 4 (km stays 4), 12 (km 0.7 * 4
  // + 0.3 * 0.25 = 2.875) and 28 (km 2.09), then speculation on every step
  // but the check steps, every 4 again.
  ASSERT_GE(speculated.size(), 3u);
  EXPECT_EQ(speculated[0], 4);
  EXPECT_EQ(speculated[1], 12);
  EXPECT_EQ(speculated[2], 28);
  for (int step = 29; step <= 40; ++step) {
    const bool spec = std::find(speculated.begin(), speculated.end(), step) != speculated.end();
    EXPECT_EQ(spec, step == 29 || (step - 29) % 4 != 0) << "step " << step;
  }
}

// Measured as modelled: speculation stays on, and every check step is plain.
TEST(SpecPlannerTest, TimeCalibrationKeepsPayingSpeculation) {
  SpecPlanner p = PayingPlanner();
  for (int step = 1; step <= 8; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->call_drafter, step % 4 != 0)
        << "step " << step << ": plain on check steps only";
    p.ObserveStepRate(4, plan->call_drafter ? 16 : 4,
                      plan->call_drafter ? plan->step_seconds : plan->plain_seconds,
                      plan->call_drafter);
  }
  EXPECT_NEAR(p.time_factor(true, 4), 1.0, 1e-9);
  EXPECT_NEAR(p.time_factor(false, 4), 1.0, 1e-9);
}

// Plain steps slower than modelled make speculation pay more: the plain
// factor scales the plain step, and speculation's added time is learned net
// of it.
TEST(SpecPlannerTest, TimeCalibrationLearnsTheAddedTimeNetOfThePlainError) {
  SpecPlanner p = PayingPlanner();
  auto plan = p.Plan(Batch4(), true);
  ASSERT_TRUE(plan.ok());
  const double plain = plan->plain_seconds, added = plan->step_seconds - plan->plain_seconds;
  for (int step = 2; step <= 4; ++step) ASSERT_TRUE(p.Plan(Batch4(), true).ok());
  // Step 4 was a check step (plain): it measured 2x the plain model.
  p.ObserveStepRate(4, 4, 2 * plain, false);
  EXPECT_NEAR(p.time_factor(false, 4), 2.0, 1e-9);
  auto next = p.Plan(Batch4(), true);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(next->call_drafter);
  EXPECT_NEAR(next->plain_seconds, 2 * plain, 1e-12);
  EXPECT_NEAR(next->step_seconds, 2 * plain + added, 1e-12);
  p.ObserveStepRate(4, 16, 2 * plain + 1.5 * added, true);
  EXPECT_NEAR(p.time_factor(true, 4), 1.5, 1e-9);
}

// A step whose batch is not the planned one (a sequence finished or joined in
// between) teaches no factor; nor does a step nobody planned.
TEST(SpecPlannerTest, TimeCalibrationNeedsThePlannedBatch) {
  SpecPlanner p = PayingPlanner();
  auto plan = p.Plan(Batch4(), true);
  ASSERT_TRUE(plan.ok());
  p.ObserveStepRate(3, 12, 4 * plan->step_seconds, /*speculated=*/true);
  EXPECT_DOUBLE_EQ(p.time_factor(true, 4), 1.0);
  p.ObserveStepRate(4, 12, 4 * plan->step_seconds, /*speculated=*/true);
  EXPECT_DOUBLE_EQ(p.time_factor(true, 4), 1.0) << "one observation per plan";
}

}  // namespace
}  // namespace treespec
