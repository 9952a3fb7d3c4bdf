// A simulated serving loop for the pieces of issue 11 together: cost models
// profiled through ProfileVerify/ProfileDraft and refined online, the
// acceptance model calibrated from verification outcomes, and the planner
// choosing shapes and pruning trees every step. Time is simulated (a known
// cost function), so the test is deterministic; it checks that the planner's
// throughput is never much below the best fixed policy — plain decoding or
// always drafting one of the candidate shapes, chosen in hindsight for the
// scenario — and never below plain decoding.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/spec/acceptance_model.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/tree_planner.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

TreeShape Shape(const char* text) {
  absl::StatusOr<TreeShape> s = TreeShape::Parse(text);
  EXPECT_TRUE(s.ok()) << text;
  return *s;
}

struct Scenario {
  std::string name;
  double accept_power = 1.0;  // P(accept child | q) = accept_scale · q^power
  double accept_scale = 1.0;
  double verify_per_token = 4e-5;
  double verify_knee_slope = 0.0;  // extra per token past 256
  int switch_step = 0;             // > 0: accept_scale becomes scale_after here
  double scale_after = 0.0;
};

struct World {
  Scenario sc;
  std::mt19937_64 rng;
  int step = 0;

  double VerifyTime(const VerifyStepFeatures& f) const {
    const double past = std::max<int64_t>(0, f.tree_tokens - 256);
    return 3e-3 + 2e-5 * f.batch + sc.verify_per_token * f.tree_tokens + 1e-9 * f.context_tokens +
           sc.verify_knee_slope * past;
  }
  static double DraftTime(const DraftStepFeatures& f) {
    if (f.levels == 0) return 0.0;
    return 3e-4 + 1e-4 * f.levels + 1e-5 * f.seq_levels + 5e-6 * f.nodes;
  }
  double Noisy(double t) {
    std::normal_distribution<double> n(0.0, 0.02);
    return t * (1.0 + n(rng));
  }

  TokenTree Draft(const TreeShape& shape) {
    std::gamma_distribution<double> g(0.6, 1.0);
    TokenTree t = TokenTree::Root(1);
    t.draft.resize(1);
    std::vector<int32_t> level = {0};
    for (int32_t fanout : shape.fanouts()) {
      std::vector<int32_t> next;
      for (int32_t u : level) {
        std::vector<double> w(6);
        double sum = 0.0;
        for (double& x : w) sum += (x = g(rng) + 1e-6);
        std::sort(w.begin(), w.end(), std::greater<double>());
        SparseDist q;
        for (int i = 0; i < 6; ++i) {
          q.tokens.push_back(100 + i);
          q.probs.push_back(static_cast<float>(w[i] / sum));
        }
        t.draft[u] = q;
        for (int32_t r = 0; r < fanout; ++r) next.push_back(t.AddNode(u, q.tokens[r]));
      }
      level = std::move(next);
    }
    return t;
  }

  std::vector<int32_t> Verify(const TokenTree& t) {
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const std::vector<std::vector<int32_t>> kids = t.ChildLists();
    std::vector<int32_t> path = {0};
    while (true) {
      const int32_t u = path.back();
      double x = u01(rng), acc = 0.0;
      int32_t chosen = -1;
      for (int32_t c : kids[u]) {
        const double scale =
            sc.switch_step > 0 && step >= sc.switch_step ? sc.scale_after : sc.accept_scale;
        acc += scale * std::pow(t.draft[u].ProbOf(t.tokens[c]), sc.accept_power);
        if (x < acc) {
          chosen = c;
          break;
        }
      }
      if (chosen < 0) return path;
      path.push_back(chosen);
    }
  }
};

constexpr int kBatch = 8;
constexpr int kSteps = 400;
constexpr int64_t kContext = 512;

// Tokens per simulated second drafting `shape` for every sequence every step
// (nullopt: plain decoding).
double FixedPolicy(World& w, const std::optional<TreeShape>& shape) {
  double tokens = 0.0, seconds = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    w.step = step;
    int64_t nodes = 0;
    for (int i = 0; i < kBatch; ++i) {
      const TokenTree t = shape.has_value() ? w.Draft(*shape) : TokenTree::Root(1);
      nodes += t.num_nodes() - 1;
      tokens += static_cast<double>(w.Verify(t).size());
    }
    const int64_t depth = shape.has_value() ? shape->Depth() : 0;
    seconds += World::DraftTime({depth, depth * kBatch, nodes}) +
               w.VerifyTime({kBatch, kBatch + nodes, kBatch * kContext});
  }
  return tokens / seconds;
}

double PlannerPolicy(World& w, const std::vector<TreeShape>& candidates) {
  // Start-up: brief profiles of the real step functions.
  const VerifyStepFn verify_fn = [&](const VerifyStepFeatures& f) -> absl::StatusOr<double> {
    return w.Noisy(w.VerifyTime(f));
  };
  const DraftStepFn draft_fn = [&](const DraftStepFeatures& f) -> absl::StatusOr<double> {
    return w.Noisy(World::DraftTime(f));
  };
  absl::StatusOr<std::vector<VerifySample>> vp =
      ProfileVerify(verify_fn, VerifyGrid({1, 4, 8, 16}, {1, 8, 32, 64}, {128, 1024}), 3);
  absl::StatusOr<std::vector<DraftSample>> dp =
      ProfileDraft(draft_fn, DraftGrid({1, 4, 8}, {1, 2, 4, 8}, {1, 2, 4}), 3);
  EXPECT_TRUE(vp.ok() && dp.ok());
  absl::StatusOr<VerifyCostModel> verify = VerifyCostModel::FitProfile(*vp);
  absl::StatusOr<DraftCostModel> draft = DraftCostModel::FitProfile(*dp);
  absl::StatusOr<AcceptanceModel> acc = AcceptanceModel::Create();
  EXPECT_TRUE(verify.ok() && draft.ok() && acc.ok());
  PlannerOptions options;
  options.explore = 0.1;
  PlanSequence seq;
  seq.context_tokens = kContext;
  const std::vector<PlanSequence> batch(kBatch, seq);

  double tokens = 0.0, seconds = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    w.step = step;
    acc->AdvanceRound();
    absl::StatusOr<ShapePlan> plan = PlanShapes(batch, candidates, *acc, *verify, *draft, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::vector<TokenTree> trees;
    DraftStepFeatures df;
    for (int i = 0; i < kBatch; ++i) {
      if (!plan->shapes[i].has_value()) {
        trees.push_back(TokenTree::Root(1));
        continue;
      }
      trees.push_back(w.Draft(*plan->shapes[i]));
      df.levels = std::max<int64_t>(df.levels, plan->shapes[i]->Depth());
      df.seq_levels += plan->shapes[i]->Depth();
      df.nodes += trees.back().num_nodes() - 1;
    }
    const double draft_s = World::DraftTime(df);
    if (plan->call_drafter) draft->Observe(df, w.Noisy(draft_s));
    absl::StatusOr<PrunePlan> prune = PruneTrees(batch, trees, *acc, *verify, draft_s, options);
    EXPECT_TRUE(prune.ok()) << prune.status();
    std::vector<TokenTree> kept;
    std::vector<std::vector<int32_t>> paths;
    for (int i = 0; i < kBatch; ++i) {
      kept.push_back(KeepNodes(trees[i], prune->kept[i]));
      paths.push_back(w.Verify(kept.back()));
      tokens += static_cast<double>(paths.back().size());
    }
    const VerifyStepFeatures vf{kBatch, prune->verify_tokens, kBatch * kContext};
    const double verify_s = w.VerifyTime(vf);
    verify->Observe(vf, w.Noisy(verify_s));
    EXPECT_TRUE(acc->ObserveBatch(kept, paths).ok());
    seconds += draft_s + verify_s;
  }
  return tokens / seconds;
}

class TreePlannerSimTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(TreePlannerSimTest, PlannerKeepsUpWithTheBestFixedPolicy) {
  const Scenario sc = GetParam();
  const std::vector<TreeShape> candidates = {Shape("chain:2"), Shape("chain:4"), Shape("2,2,1,1"),
                                             Shape("3,2,2,1,1"), Shape("4,2,2,2,1,1,1,1")};
  World plain_w{sc, std::mt19937_64(1)};
  const double plain = FixedPolicy(plain_w, std::nullopt);
  double best_fixed = plain;
  std::string best_name = "plain";
  for (size_t k = 0; k < candidates.size(); ++k) {
    World w{sc, std::mt19937_64(2 + k)};
    const double r = FixedPolicy(w, candidates[k]);
    if (r > best_fixed) {
      best_fixed = r;
      best_name = candidates[k].ToString();
    }
  }
  World plan_w{sc, std::mt19937_64(100)};
  const double planned = PlannerPolicy(plan_w, candidates);
  EXPECT_GT(planned, 0.95 * best_fixed) << sc.name << ": best fixed policy " << best_name << " "
                                        << best_fixed << " tok/s, planner " << planned << " tok/s";
  EXPECT_GT(planned, 0.97 * plain) << sc.name << ": speculation must not cost throughput";
  if (sc.switch_step > 0) {
    EXPECT_GT(planned, 1.02 * best_fixed) << sc.name << ": adapting beats any fixed policy";
  }
  std::printf("%-22s plain %7.1f  best fixed %7.1f (%s)  planner %7.1f tok/s\n", sc.name.c_str(),
              plain, best_fixed, best_name.c_str(), planned);
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, TreePlannerSimTest,
    ::testing::Values(Scenario{"calibrated_drafter", 1.0, 1.0, 4e-5, 0.0},
                      Scenario{"useless_drafter", 1.0, 0.0, 4e-5, 0.0},
                      Scenario{"weak_drafter", 2.0, 0.6, 4e-5, 0.0},
                      Scenario{"dear_tokens_past_knee", 1.0, 1.0, 4e-5, 4e-4},
                      Scenario{"cheap_verify", 1.0, 1.0, 2e-6, 0.0},
                      // The text changes halfway: the drafter stops or starts being useful.
                      Scenario{"drafter_turns_useless", 1.0, 1.0, 4e-5, 0.0, kSteps / 2, 0.0},
                      Scenario{"drafter_turns_useful", 1.0, 0.0, 4e-5, 0.0, kSteps / 2, 1.0}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

}  // namespace
}  // namespace treespec
