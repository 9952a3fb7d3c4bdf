#include "core/spec/acceptance_model.h"

#include <algorithm>
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

AcceptanceModel Model(AcceptanceModelOptions o = {}) {
  absl::StatusOr<AcceptanceModel> m = AcceptanceModel::Create(std::move(o));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// A synthetic drafter and target. Every node's draft distribution q is a
// random distribution over 6 tokens in descending order; the node's children
// are its top fanout tokens (a top-k drafter). The target accepts child c of
// an accepted node with probability g(q_c, depth), siblings exclusively.
double TrueAcceptance(double q, int32_t depth) {
  return std::pow(q, 1.5) * (depth <= 2 ? 1.0 : 0.7);
}

struct Synthetic {
  explicit Synthetic(uint64_t seed) : rng(seed) {}

  SparseDist RandomDist() {
    std::gamma_distribution<double> g(0.6, 1.0);
    std::vector<double> w(6);
    double sum = 0.0;
    for (double& x : w) sum += (x = g(rng) + 1e-6);
    std::sort(w.begin(), w.end(), std::greater<double>());
    SparseDist d;
    for (int i = 0; i < 6; ++i) {
      d.tokens.push_back(100 + i);
      d.probs.push_back(static_cast<float>(w[i] / sum));
    }
    return d;
  }

  TokenTree Draft(const TreeShape& shape) {
    TokenTree t = TokenTree::Root(1);
    t.draft.resize(1);
    std::vector<int32_t> level = {0};
    for (int32_t fanout : shape.fanouts()) {
      std::vector<int32_t> next;
      for (int32_t u : level) {
        t.draft[u] = RandomDist();
        for (int32_t r = 0; r < fanout; ++r) next.push_back(t.AddNode(u, t.draft[u].tokens[r]));
      }
      level = std::move(next);
    }
    return t;
  }

  std::vector<int32_t> Verify(const TokenTree& t) {
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    std::vector<int32_t> path = {0};
    const std::vector<int32_t> depth = t.Depths();
    while (true) {
      const int32_t u = path.back();
      double x = u01(rng), acc = 0.0;
      int32_t chosen = -1;
      for (int32_t c : t.Children(u)) {
        acc += TrueAcceptance(t.draft[u].ProbOf(t.tokens[c]), depth[c]);
        if (x < acc) {
          chosen = c;
          break;
        }
      }
      if (chosen < 0) return path;
      path.push_back(chosen);
    }
  }

  std::mt19937_64 rng;
};

TEST(AcceptanceModelTest, PriorBeforeData) {
  const AcceptanceModel m = Model();
  // (Within the look-up grid's resolution, 1/256.)
  EXPECT_NEAR(m.NodeAcceptance(0.35, 1), 0.35, 2e-3);
  EXPECT_NEAR(m.NodeAcceptance(0.95, 7), 0.95, 2e-3);
  EXPECT_DOUBLE_EQ(m.RankAcceptance(1, 0), 0.5);
  EXPECT_DOUBLE_EQ(m.RankAcceptance(3, 2), 0.5 * 0.4 * 0.4);
  EXPECT_DOUBLE_EQ(m.ExpectedTokens(Shape("chain:3")), 1 + 0.5 + 0.25 + 0.125);
  // Two children at level 1: 0.5 + 0.2 = 0.7.
  EXPECT_DOUBLE_EQ(m.ExpectedTokens(Shape("2,1")), 1 + 0.7 + 0.7 * 0.5);
  const std::vector<double> reach = m.LevelReach(Shape("2,1"));
  ASSERT_EQ(reach.size(), 2u);
  EXPECT_DOUBLE_EQ(reach[1], 0.35);
}

TEST(AcceptanceModelTest, CalibrationConvergesToTheSyntheticDrafter) {
  AcceptanceModel m = Model();
  Synthetic s(11);
  const TreeShape shape = Shape("3,2,2,1");
  for (int i = 0; i < 20000; ++i) {
    const TokenTree t = s.Draft(shape);
    ASSERT_TRUE(m.Observe(t, s.Verify(t)).ok());
  }
  // Node level: q in [0.05, 0.9] has plenty of trials at depths 1 and 3.
  for (int32_t depth : {1, 3}) {
    for (double q : {0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75}) {
      EXPECT_NEAR(m.NodeAcceptance(q, depth), TrueAcceptance(q, depth), 0.04)
          << "q " << q << " depth " << depth;
    }
  }
  // Shape level: the predicted tokens per step match a fresh simulation.
  Synthetic fresh(12);
  for (const char* text : {"3,2,2,1", "1,1,1,1", "2,1"}) {
    double sum = 0.0, predicted_from_q = 0.0;
    const int kSteps = 20000;
    std::vector<double> a, pi;
    for (int i = 0; i < kSteps; ++i) {
      const TokenTree t = fresh.Draft(Shape(text));
      sum += static_cast<double>(fresh.Verify(t).size());  // accepted + bonus
      m.PathAcceptance(t, &a, &pi);
      for (double p : pi) predicted_from_q += p;  // pi[0] = 1 is the bonus
    }
    const double empirical = sum / kSteps;
    EXPECT_NEAR(m.ExpectedTokens(Shape(text)), empirical, 0.03 * empirical) << text;
    EXPECT_NEAR(predicted_from_q / kSteps, empirical, 0.03 * empirical) << text;
  }
}

TEST(AcceptanceModelTest, CountsOnlyChildrenOfAcceptedNodes) {
  AcceptanceModel m = Model();
  // 0 → {1, 2}; 1 → {3}; 2 → {4, 5}. The target accepts 2, then nothing.
  TokenTree t = TokenTree::Root(1);
  t.AddNode(0, 10);
  t.AddNode(0, 11);
  t.AddNode(1, 12);
  t.AddNode(2, 13);
  t.AddNode(2, 14);
  ASSERT_TRUE(m.Observe(t, {0, 2}).ok());
  EXPECT_EQ(m.rank_trials(1, 0), 1.0);
  EXPECT_EQ(m.rank_accepted(1, 0), 0.0);
  EXPECT_EQ(m.rank_trials(1, 1), 1.0);
  EXPECT_EQ(m.rank_accepted(1, 1), 1.0);
  // Node 3 sits under a rejected node: untested. Nodes 4 and 5 were rejected.
  EXPECT_EQ(m.rank_trials(2, 0), 1.0);
  EXPECT_EQ(m.rank_accepted(2, 0), 0.0);
  EXPECT_EQ(m.rank_trials(2, 1), 1.0);
  EXPECT_EQ(m.num_observed_trees(), 1);
}

TEST(AcceptanceModelTest, RejectsAPathThatIsNotInTheTree) {
  AcceptanceModel m = Model();
  TokenTree t = TokenTree::Chain(1, {10, 11});
  absl::Status s = m.Observe(t, {0, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("path[1] = 2"));
  EXPECT_EQ(m.Observe(t, {1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Observe(t, {0, 7}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.rank_trials(1, 0), 0.0) << "nothing is recorded from a bad path";
  EXPECT_EQ(m.num_observed_trees(), 0);
}

TEST(AcceptanceModelTest, ObserveBatchEqualsObservingOneByOne) {
  Synthetic s(21);
  std::vector<TokenTree> trees;
  std::vector<std::vector<int32_t>> paths;
  for (int i = 0; i < 300; ++i) {
    trees.push_back(s.Draft(Shape("3,2,1")));
    paths.push_back(s.Verify(trees.back()));
  }
  AcceptanceModel one = Model(), batch = Model();
  for (size_t i = 0; i < trees.size(); ++i) ASSERT_TRUE(one.Observe(trees[i], paths[i]).ok());
  ASSERT_TRUE(batch.ObserveBatch(trees, paths).ok());
  EXPECT_EQ(batch.num_observed_trees(), 300);
  for (double q : {0.1, 0.33, 0.5, 0.8}) {
    for (int32_t d : {1, 2, 3})
      EXPECT_DOUBLE_EQ(one.NodeAcceptance(q, d), batch.NodeAcceptance(q, d));
  }
  for (int32_t r : {0, 1, 2})
    EXPECT_DOUBLE_EQ(one.RankAcceptance(2, r), batch.RankAcceptance(2, r));
  // One bad path: nothing of the batch is recorded.
  paths[7] = {0, 99};
  absl::Status bad = batch.ObserveBatch(trees, paths);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("paths[7]"));
  EXPECT_EQ(batch.num_observed_trees(), 300);
}

TEST(AcceptanceModelTest, IsotonicCurveIsNonDecreasingInQ) {
  AcceptanceModel m = Model();
  // Noisy data where q = 0.55 happens to be accepted less often than q = 0.45.
  auto feed = [&](float q, int accepted, int total) {
    for (int i = 0; i < total; ++i) {
      TokenTree t = TokenTree::Root(1);
      t.draft.resize(1);
      t.draft[0].tokens = {10, 11};
      t.draft[0].probs = {q, 1.0f - q};
      t.AddNode(0, 10);
      ASSERT_TRUE(
          m.Observe(t, i < accepted ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0}).ok());
    }
  };
  feed(0.45f, 60, 100);
  feed(0.55f, 40, 100);
  double last = 0.0;
  for (double q = 0.0; q <= 1.0; q += 0.01) {
    const double a = m.NodeAcceptance(q, 1);
    EXPECT_GE(a, last - 1e-12) << "q " << q;
    last = a;
  }
  EXPECT_NEAR(m.NodeAcceptance(0.46, 1), m.NodeAcceptance(0.54, 1), 1e-9) << "pooled";
  EXPECT_NEAR(m.NodeAcceptance(0.5, 1), 0.5, 0.02) << "pooled: (60 + 40) / 200 and the prior";
}

TEST(AcceptanceModelTest, SiblingEstimatesNeverSumPastOne) {
  AcceptanceModelOptions o;
  o.q_prior_scale = 3.0;  // an over-confident prior: 3·q for each child
  const AcceptanceModel m = Model(o);
  TokenTree t = TokenTree::Root(1);
  t.draft.resize(1);
  t.draft[0].tokens = {10, 11, 12};
  t.draft[0].probs = {0.5f, 0.3f, 0.2f};
  for (int32_t tok : {10, 11, 12}) t.AddNode(0, tok);
  std::vector<double> a, pi;
  m.PathAcceptance(t, &a, &pi);
  EXPECT_NEAR(a[1] + a[2] + a[3], 1.0, 1e-12);
  EXPECT_GT(a[1], a[2]);
  EXPECT_EQ(pi[0], 1.0);
}

TEST(AcceptanceModelTest, ExplorationBonusGrowsWhileADrafterIsNotTried) {
  AcceptanceModel m = Model();
  // A useless drafter: 200 trees, nothing accepted.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(m.Observe(TokenTree::Chain(1, {10}), {0}).ok());
    m.AdvanceRound();
  }
  EXPECT_LT(m.RankAcceptance(1, 0), 0.02);
  const double early = m.RankAcceptance(1, 0, 1.0);
  for (int i = 0; i < 100000; ++i) m.AdvanceRound();  // plain steps: no trials
  const double late = m.RankAcceptance(1, 0, 1.0);
  EXPECT_GT(late, early + 0.02);
  EXPECT_DOUBLE_EQ(m.RankAcceptance(1, 0), m.RankAcceptance(1, 0, 0.0)) << "no bonus at 0";
}

TEST(AcceptanceModelTest, OldEvidenceFades) {
  AcceptanceModelOptions o;
  o.max_count = 200;
  AcceptanceModel m = Model(o);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.Observe(TokenTree::Chain(1, {10}), {0, 1}).ok());
  EXPECT_GT(m.RankAcceptance(1, 0), 0.95);
  // The drafter stops being any good.
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(m.Observe(TokenTree::Chain(1, {10}), {0}).ok());
  EXPECT_LT(m.RankAcceptance(1, 0), 0.1);
  EXPECT_LE(m.rank_trials(1, 0), 200.0);
}

TEST(AcceptanceModelTest, OptionsAreValidated) {
  AcceptanceModelOptions o;
  o.depth_bucket_starts = {2, 3};
  EXPECT_EQ(AcceptanceModel::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.depth_bucket_starts = {1, 3, 3};
  EXPECT_THAT(std::string(AcceptanceModel::Create(o).status().message()),
              HasSubstr("depth_bucket_starts[2]"));
  o = {};
  o.prior_strength = -1;
  EXPECT_THAT(std::string(AcceptanceModel::Create(o).status().message()),
              HasSubstr("prior_strength"));
  o = {};
  o.num_q_bins = 0;
  EXPECT_EQ(AcceptanceModel::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace treespec
