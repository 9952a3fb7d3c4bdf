#include "core/spec/verify.h"

#include <algorithm>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::ElementsAre;

constexpr int64_t kVocab = 10;

// Logits rows [num_nodes, kVocab], each with `peak` at one token and small
// distinct values elsewhere.
std::vector<float> PeakedLogits(const std::vector<int32_t>& peaks, float peak = 5.0f) {
  std::vector<float> logits(peaks.size() * kVocab);
  for (size_t r = 0; r < peaks.size(); ++r) {
    for (int64_t t = 0; t < kVocab; ++t) logits[r * kVocab + t] = 0.01f * t;
    logits[r * kVocab + peaks[r]] = peak;
  }
  return logits;
}

SamplingParams Temp(float t, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

RngKey Key(uint64_t seed, uint32_t step) { return RngKey{seed, RngStream::kVerify, step, 0}; }

// root(1) ─┬─ 5 (n1) ─┬─ 2 (n3)
//          │          └─ 3 (n4)
//          └─ 7 (n2) ──── 4 (n5)
TokenTree SmallTree() {
  TokenTree t = TokenTree::Root(1);
  t.AddNode(0, 5);
  t.AddNode(0, 7);
  t.AddNode(1, 2);
  t.AddNode(1, 3);
  t.AddNode(2, 4);
  return t;
}

TEST(VerifyGreedyTest, FollowsArgmaxPathAndAddsBonus) {
  const TokenTree tree = SmallTree();
  ASSERT_TRUE(tree.Validate(kVocab).ok());
  // Row 0 → 7 (node 2), row 2 → 4 (node 5), row 5 → 9 (bonus).
  const std::vector<float> logits = PeakedLogits({7, 0, 4, 0, 0, 9});
  const VerifyResult r = VerifyGreedy(tree, logits.data(), kVocab);
  EXPECT_THAT(r.path, ElementsAre(0, 2, 5));
  EXPECT_THAT(r.accepted_tokens, ElementsAre(7, 4));
  EXPECT_EQ(r.bonus_token, 9);
  EXPECT_THAT(r.NewTokens(), ElementsAre(7, 4, 9));
  EXPECT_EQ(r.num_new_tokens(), 3);
  ASSERT_EQ(r.depths.size(), 3u);
  EXPECT_EQ(r.depths[0].num_children, 2);
  EXPECT_EQ(r.depths[0].accepted_rank, 1);
  EXPECT_EQ(r.depths[1].node, 2);
  EXPECT_EQ(r.depths[1].num_children, 1);
  EXPECT_EQ(r.depths[1].accepted_rank, 0);
  EXPECT_EQ(r.depths[2].num_children, 0);
  EXPECT_EQ(r.depths[2].accepted_rank, -1);
}

TEST(VerifyGreedyTest, RejectsAtRootWhenArgmaxIsNotDrafted) {
  const TokenTree tree = SmallTree();
  const std::vector<float> logits = PeakedLogits({6, 2, 4, 0, 0, 9});
  const VerifyResult r = VerifyGreedy(tree, logits.data(), kVocab);
  EXPECT_THAT(r.path, ElementsAre(0));
  EXPECT_TRUE(r.accepted_tokens.empty());
  EXPECT_EQ(r.bonus_token, 6);
  EXPECT_EQ(r.depths[0].accepted_rank, -1);
  EXPECT_EQ(r.depths[0].num_children, 2);
}

TEST(VerifyGreedyTest, RejectsInsideTheTree) {
  const TokenTree tree = SmallTree();
  // Row 0 → 5 (node 1); row 1 → 8, which neither child (2, 3) carries.
  const std::vector<float> logits = PeakedLogits({5, 8, 4, 0, 0, 9});
  const VerifyResult r = VerifyGreedy(tree, logits.data(), kVocab);
  EXPECT_THAT(r.path, ElementsAre(0, 1));
  EXPECT_THAT(r.NewTokens(), ElementsAre(5, 8));
}

TEST(VerifyGreedyTest, TiesGoToTheLowestTokenId) {
  const TokenTree tree = TokenTree::Chain(0, {6});
  std::vector<float> logits(2 * kVocab, 0.0f);
  logits[3] = logits[6] = 2.0f;  // row 0: tie between 3 and 6
  const VerifyResult r = VerifyGreedy(tree, logits.data(), kVocab);
  EXPECT_THAT(r.NewTokens(), ElementsAre(3));
}

TEST(VerifyTest, EmptyTreeIsAPlainDecodingStep) {
  const TokenTree tree = TokenTree::Root(3);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);
  const SamplingParams params = Temp(0.9f, 6);
  std::vector<float> p;
  ProcessLogits(logits.data(), kVocab, params, &p);
  for (uint32_t step = 0; step < 50; ++step) {
    const RngKey key = Key(11, step);
    const int32_t plain = SampleDense(p, Uniform(RngKey{11, RngStream::kVerify, step, 0}, 0));
    for (VerifyMode mode : {VerifyMode::kMultiRound, VerifyMode::kTargetSampling}) {
      const VerifyResult r = Verify(mode, tree, logits.data(), kVocab, params, key);
      EXPECT_THAT(r.path, ElementsAre(0)) << VerifyModeName(mode);
      EXPECT_THAT(r.NewTokens(), ElementsAre(plain)) << VerifyModeName(mode) << " step " << step;
    }
  }
  const VerifyResult g = Verify(VerifyMode::kGreedy, tree, logits.data(), kVocab, Temp(0), {});
  EXPECT_THAT(g.NewTokens(), ElementsAre(Argmax(logits.data(), kVocab)));
}

// A deterministic "target model": the logits after a prefix are a pseudo-random
// function of the prefix tokens.
std::vector<float> ModelLogits(const std::vector<int32_t>& prefix) {
  uint32_t h = 2166136261u;
  for (int32_t t : prefix) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
  std::mt19937 rng(h);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> row(kVocab);
  for (float& x : row) x = normal(rng);
  return row;
}

// Builds a shape (3,2,2) tree whose first child at every node is the
// target's argmax, plus the logits of every node under ModelLogits.
void BuildTreeWithArgmaxChain(uint32_t seed, TokenTree* tree, std::vector<float>* logits) {
  std::mt19937 rng(seed);
  *tree = TokenTree::Root(static_cast<int32_t>(rng() % kVocab));
  const std::vector<int> fanouts = {3, 2, 2};
  std::vector<int32_t> frontier = {0};
  for (int fanout : fanouts) {
    std::vector<int32_t> next;
    for (int32_t v : frontier) {
      std::vector<int32_t> prefix;
      for (int32_t n : tree->PathTo(v)) prefix.push_back(tree->tokens[n]);
      const std::vector<float> row = ModelLogits(prefix);
      std::set<int32_t> used = {Argmax(row.data(), kVocab)};
      next.push_back(tree->AddNode(v, *used.begin()));
      while (static_cast<int>(used.size()) < fanout) {
        const int32_t t = static_cast<int32_t>(rng() % kVocab);
        if (used.insert(t).second) next.push_back(tree->AddNode(v, t));
      }
    }
    frontier = next;
  }
  logits->clear();
  for (int32_t v = 0; v < tree->num_nodes(); ++v) {
    std::vector<int32_t> prefix;
    for (int32_t n : tree->PathTo(v)) prefix.push_back(tree->tokens[n]);
    const std::vector<float> row = ModelLogits(prefix);
    logits->insert(logits->end(), row.begin(), row.end());
  }
}

TEST(VerifyGreedyTest, TreeContainingTheArgmaxChainIsFullyAccepted) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    TokenTree tree;
    std::vector<float> logits;
    BuildTreeWithArgmaxChain(seed, &tree, &logits);
    ASSERT_TRUE(tree.Validate(kVocab).ok()) << tree.Validate(kVocab);
    const VerifyResult r = VerifyGreedy(tree, logits.data(), kVocab);
    const std::vector<int32_t> depths = tree.Depths();
    const int32_t depth = *std::max_element(depths.begin(), depths.end());
    EXPECT_EQ(r.num_new_tokens(), depth + 1) << "seed " << seed;
    // The emitted tokens are what plain greedy decoding would produce.
    std::vector<int32_t> prefix = {tree.tokens[0]};
    for (int32_t t : r.NewTokens()) {
      const std::vector<float> row = ModelLogits(prefix);
      EXPECT_EQ(t, Argmax(row.data(), kVocab)) << "seed " << seed;
      prefix.push_back(t);
    }
  }
}

TEST(VerifyTest, GreedyModeIgnoresTemperatureAndSamplingModesFallBackToGreedy) {
  const TokenTree tree = SmallTree();
  const std::vector<float> logits = PeakedLogits({7, 0, 4, 0, 0, 9}, 1.0f);
  const VerifyResult greedy =
      Verify(VerifyMode::kGreedy, tree, logits.data(), kVocab, Temp(1.0f), Key(1, 1));
  EXPECT_THAT(greedy.NewTokens(), ElementsAre(7, 4, 9));
  const VerifyResult fallback =
      Verify(VerifyMode::kMultiRound, tree, logits.data(), kVocab, Temp(0.0f), Key(1, 1));
  EXPECT_THAT(fallback.NewTokens(), ElementsAre(7, 4, 9));
}

TEST(VerifyTest, LowTemperatureSamplingAcceptsTheArgmaxChain) {
  for (uint32_t seed = 0; seed < 10; ++seed) {
    TokenTree tree;
    std::vector<float> logits;
    BuildTreeWithArgmaxChain(seed, &tree, &logits);
    for (float& x : logits) x *= 100.0f;  // near one-hot after softmax
    const VerifyResult greedy = VerifyGreedy(tree, logits.data(), kVocab);
    const VerifyResult ts = Verify(VerifyMode::kTargetSampling, tree, logits.data(), kVocab,
                                   Temp(1.0f), Key(seed, 3));
    EXPECT_EQ(ts.NewTokens(), greedy.NewTokens()) << "seed " << seed;
  }
}

SparseDist Dist(std::vector<int32_t> tokens, std::vector<float> probs) {
  SparseDist d;
  d.tokens = std::move(tokens);
  d.probs = std::move(probs);
  return d;
}

TEST(VerifyMultiRoundTest, AcceptsWhenTargetMassCoversDraftMass) {
  // p(5) ≈ 1 ≥ q(5) = 0.5, so the first child is always accepted.
  TokenTree tree = TokenTree::Chain(0, {5});
  tree.draft = {Dist({5, 2}, {0.5f, 0.5f}), {}};
  ASSERT_TRUE(tree.Validate(kVocab).ok());
  const std::vector<float> logits = PeakedLogits({5, 3}, 30.0f);
  for (uint32_t step = 0; step < 200; ++step) {
    const VerifyResult r = VerifyMultiRound(tree, logits.data(), kVocab, Temp(1.0f), Key(3, step));
    ASSERT_THAT(r.path, ElementsAre(0, 1)) << "step " << step;
    EXPECT_EQ(r.bonus_token, 3);
  }
}

TEST(VerifyMultiRoundTest, NeverAcceptsOrEmitsATokenTheTargetExcludes) {
  // top_k = 3 keeps tokens {9, 8, 7} of row 0; children 1 and 2 have p = 0.
  TokenTree tree = TokenTree::Root(0);
  tree.draft.resize(1);
  tree.AddNode(0, 1);
  tree.AddNode(0, 2);
  tree.AddNode(0, 9);
  tree.draft[0] = Dist({1, 2, 9, 8}, {0.4f, 0.3f, 0.2f, 0.1f});
  ASSERT_TRUE(tree.Validate(kVocab).ok()) << tree.Validate(kVocab);
  std::vector<float> logits(4 * kVocab);
  for (int64_t t = 0; t < kVocab; ++t) logits[t] = 0.3f * t;
  int accepted_9 = 0;
  for (uint32_t step = 0; step < 2000; ++step) {
    const VerifyResult r =
        VerifyMultiRound(tree, logits.data(), kVocab, Temp(1.0f, 3), Key(5, step));
    const int32_t first = r.NewTokens()[0];
    EXPECT_TRUE(first == 9 || first == 8 || first == 7) << "step " << step << " got " << first;
    if (r.path.size() > 1) {
      EXPECT_EQ(r.path[1], 3) << "step " << step;
      ++accepted_9;
    }
  }
  EXPECT_GT(accepted_9, 0);
}

TEST(VerifyTest, BonusIsNeverARejectedSibling) {
  // Rejection leaves residual mass 0 on every rejected child, so the bonus drawn
  // where a step stops is never one of that node's children (both rules).
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (uint32_t trial = 0; trial < 300; ++trial) {
    std::vector<float> logits(4 * kVocab);
    for (float& x : logits) x = normal(rng);
    SparseDist q = TopKDist(logits.data(), kVocab, 5, 2.0f);  // a flatter draft
    TokenTree tree = TokenTree::Root(0);
    tree.draft.resize(1);
    for (int i = 0; i < 3; ++i) tree.AddNode(0, q.tokens[(i * 2 + trial) % 5]);
    tree.draft[0] = q;
    ASSERT_TRUE(tree.Validate(kVocab).ok()) << tree.Validate(kVocab);
    for (VerifyMode mode : {VerifyMode::kMultiRound, VerifyMode::kTargetSampling}) {
      const VerifyResult r = Verify(mode, tree, logits.data(), kVocab, Temp(1.0f), Key(8, trial));
      if (r.path.size() == 1) {
        for (int32_t c : tree.Children(0)) {
          EXPECT_NE(r.bonus_token, tree.tokens[c]) << VerifyModeName(mode) << " trial " << trial;
        }
      }
    }
  }
}

TEST(VerifyMultiRoundTest, NodesWithoutDraftUseTargetSampling) {
  TokenTree tree;
  std::vector<float> logits;
  BuildTreeWithArgmaxChain(4, &tree, &logits);
  for (uint32_t step = 0; step < 100; ++step) {
    const VerifyResult a =
        VerifyMultiRound(tree, logits.data(), kVocab, Temp(1.2f), Key(21, step));
    const VerifyResult b =
        VerifyTargetSampling(tree, logits.data(), kVocab, Temp(1.2f), Key(21, step));
    EXPECT_EQ(a.path, b.path) << "step " << step;
    EXPECT_EQ(a.bonus_token, b.bonus_token) << "step " << step;
  }
}

TEST(VerifyTest, DeterministicInTheKeyAndIgnoresStreamAndNode) {
  TokenTree tree;
  std::vector<float> logits;
  BuildTreeWithArgmaxChain(9, &tree, &logits);
  std::set<std::vector<int32_t>> outcomes;
  for (uint32_t step = 0; step < 50; ++step) {
    const VerifyResult a = Verify(VerifyMode::kTargetSampling, tree, logits.data(), kVocab,
                                  Temp(1.5f), Key(77, step));
    RngKey other = Key(77, step);
    other.stream = RngStream::kSample;
    other.node = 12;
    const VerifyResult b =
        Verify(VerifyMode::kTargetSampling, tree, logits.data(), kVocab, Temp(1.5f), other);
    EXPECT_EQ(a.NewTokens(), b.NewTokens()) << "step " << step;
    outcomes.insert(a.NewTokens());
  }
  EXPECT_GT(outcomes.size(), 5u);
}

TEST(VerifyTest, ValidateVerifyMode) {
  EXPECT_TRUE(ValidateVerifyMode(VerifyMode::kGreedy, Temp(0.0f)).ok());
  EXPECT_TRUE(ValidateVerifyMode(VerifyMode::kMultiRound, Temp(0.8f, 20, 0.9f)).ok());
  EXPECT_TRUE(ValidateVerifyMode(VerifyMode::kTargetSampling, Temp(1.0f)).ok());
  const std::vector<std::pair<VerifyMode, SamplingParams>> bad = {
      {VerifyMode::kGreedy, Temp(0.7f)},
      {VerifyMode::kMultiRound, Temp(0.0f)},
      {VerifyMode::kTargetSampling, Temp(0.0f)},
      {VerifyMode::kMultiRound, Temp(1.0f, -1)},
      {VerifyMode::kMultiRound, Temp(1.0f, 0, 0.0f)},
      {VerifyMode::kTargetSampling, Temp(-1.0f)},
  };
  for (const auto& [mode, params] : bad) {
    absl::Status s = ValidateVerifyMode(mode, params);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << VerifyModeName(mode) << " T=" << params.temperature << ": " << s;
  }
}

TEST(VerifyTest, ParseVerifyMode) {
  for (VerifyMode mode :
       {VerifyMode::kGreedy, VerifyMode::kMultiRound, VerifyMode::kTargetSampling}) {
    absl::StatusOr<VerifyMode> parsed = ParseVerifyMode(VerifyModeName(mode));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(ParseVerifyMode("beam").status().code(), absl::StatusCode::kInvalidArgument);
}

// The sampling rules from processed rows fetched on demand (the worker keeps
// rows on the device) give the result of the rules on the logits, and read
// only the rows on the accepted path.
TEST(VerifySampledRowsTest, EqualsVerifyOnTheLogitsAndReadsOnlyThePath) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const TokenTree base = SmallTree();
  for (int trial = 0; trial < 300; ++trial) {
    TokenTree tree = base;
    if (trial % 2 == 0) {
      // A draft q at the root and at node 1 (multi-round rounds there).
      tree.draft.resize(tree.num_nodes());
      tree.draft[0] = SparseDist{{5, 7, 9}, {0.5f, 0.3f, 0.2f}};
      tree.draft[1] = SparseDist{{2, 3}, {0.6f, 0.4f}};
    }
    std::vector<float> logits(tree.num_nodes() * kVocab);
    for (float& x : logits) x = u(rng);
    const SamplingParams params = Temp(0.5f + 0.1f * (trial % 10), trial % 3 == 0 ? 4 : 0,
                                       trial % 5 == 0 ? 0.8f : 1.0f);
    const VerifyMode mode = trial % 3 == 2 ? VerifyMode::kTargetSampling : VerifyMode::kMultiRound;
    const RngKey key = Key(100 + trial, trial);
    const VerifyResult want = Verify(mode, tree, logits.data(), kVocab, params, key);
    std::vector<int32_t> read;
    std::vector<float> row;
    absl::StatusOr<VerifyResult> got =
        VerifySampledRows(mode, tree, kVocab, params, key, [&](int32_t v) -> absl::StatusOr<const float*> {
          read.push_back(v);
          ProcessLogits(logits.data() + v * kVocab, kVocab, params, &row);
          return row.data();
        });
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->path, want.path) << "trial " << trial;
    EXPECT_EQ(got->accepted_tokens, want.accepted_tokens) << "trial " << trial;
    EXPECT_EQ(got->bonus_token, want.bonus_token) << "trial " << trial;
    EXPECT_EQ(read, want.path) << "trial " << trial << ": rows off the accepted path were read";
  }
}

TEST(VerifySampledRowsTest, AFailedFetchFailsTheVerification) {
  const TokenTree tree = SmallTree();
  absl::StatusOr<VerifyResult> r = VerifySampledRows(
      VerifyMode::kTargetSampling, tree, kVocab, Temp(1.0f), Key(1, 1),
      [](int32_t) -> absl::StatusOr<const float*> { return absl::UnavailableError("device lost"); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace treespec
