// The lane's planner state (coordinator/spec_planner.h): start-up profiles as
// priors, and the measured check that overrides the models when the realized
// rate of speculative steps falls below that of plain steps.
#include "coordinator/spec_planner.h"

#include "gtest/gtest.h"

namespace treespec {
namespace {

// A planner whose models make chain:3 pay clearly for a batch of 4: cheap
// drafting, verify dominated by its per-step cost, drafts always accepted.
SpecPlanner PayingPlanner() {
  SpecPlannerOptions o;
  o.candidates = {*TreeShape::Parse("chain:3")};
  o.probe_steps = 0;
  o.planner.explore = 0.0;
  o.check_every = 4;
  SpecPlanner p(o);
  VerifyCostModel::Coefficients v;
  v.per_step = 10e-3;
  v.per_token = 0.1e-3;
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

TEST(SpecPlannerTest, MeasuredCheckTurnsSlowSpeculationPlain) {
  SpecPlanner p = PayingPlanner();
  // Measured: speculative steps commit 8 tokens in 40 ms, plain steps 4 in 10 ms.
  p.ObserveStepRate(4, 8, 40e-3, /*speculated=*/true);
  p.ObserveStepRate(4, 4, 10e-3, /*speculated=*/false);
  EXPECT_LT(p.realized_spec_ratio(), p.realized_plain_ratio());
  int speculated = 0;
  for (int step = 1; step <= 8; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    speculated += plan->call_drafter;
    EXPECT_EQ(plan->call_drafter, step % 4 == 0) << "step " << step << ": only check steps speculate";
  }
  EXPECT_EQ(speculated, 2);
}

TEST(SpecPlannerTest, MeasuredCheckKeepsPayingSpeculation) {
  SpecPlanner p = PayingPlanner();
  p.ObserveStepRate(4, 14, 15e-3, /*speculated=*/true);
  p.ObserveStepRate(4, 4, 10e-3, /*speculated=*/false);
  EXPECT_GT(p.realized_spec_ratio(), p.realized_plain_ratio());
  for (int step = 1; step <= 8; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->call_drafter, step % 4 != 0) << "step " << step << ": plain on check steps only";
  }
}

TEST(SpecPlannerTest, WithoutAPlainMeasurementOnlyCheckStepsArePlain) {
  SpecPlanner p = PayingPlanner();
  p.ObserveStepRate(4, 8, 40e-3, /*speculated=*/true);
  for (int step = 1; step <= 4; ++step) {
    auto plan = p.Plan(Batch4(), true);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->call_drafter, step != 4) << "step " << step;
  }
}

}  // namespace
}  // namespace treespec
