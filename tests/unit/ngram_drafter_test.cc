// The n-gram drafter: its index (longest suffix match, counts, recency), the
// trees it proposes within a TreeShape, the Drafter contract (steps, ids,
// capacity, leases), and a chi-square test that trees drafted without q are
// verified exactly by the sampling rules, with a power check: the same trees
// given a count-based q (children NOT sampled from it) fail multi-round.
#include "drafter_service/ngram_drafter.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "core/spec/verify.h"
#include "gtest/gtest.h"
#include "tests/testing/chi_square.h"

namespace treespec {
namespace {

using ::treespec::testing::ChiSquareResult;
using ::treespec::testing::ChiSquareTest;

DrafterOptions Options(int64_t vocab = 16) {
  DrafterOptions o;
  o.kind = "ngram";
  o.vocab_size = vocab;
  o.max_sequences = 4;
  return o;
}

TreeShape Shape(const char* text) { return *TreeShape::Parse(text); }

TEST(NgramIndexTest, LongestSuffixWinsOverShorterOnes) {
  NgramIndex index(1, 4);
  // "1 2 3" then "9 2 5" then "1 2": after "1 2" came 3, after "2" came 3 and 5.
  index.Append({1, 2, 3, 9, 2, 5, 5, 1, 2});
  int32_t n = 0;
  auto c = index.Lookup({}, 4, &n);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].token, 3);
  EXPECT_EQ(n, 2);
  // Through a drafted path: history ++ {3} ends "1 2 3", followed by 9.
  c = index.Lookup({3}, 4, &n);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].token, 9);
  EXPECT_EQ(n, 3);
}

TEST(NgramIndexTest, CountsThenRecencyOrderContinuations) {
  NgramIndex index(1, 2);
  index.Append({7, 1, 7, 2, 7, 2, 7, 3, 7});
  auto c = index.Lookup({}, 8);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].token, 2);  // twice
  EXPECT_EQ(c[0].count, 2);
  EXPECT_EQ(c[1].token, 3);  // once, latest
  EXPECT_EQ(c[2].token, 1);
  EXPECT_EQ(index.Lookup({}, 2).size(), 2u);
}

TEST(NgramIndexTest, NoMatchGivesNothing) {
  NgramIndex index(2, 4);
  index.Append({1, 2, 3, 4});
  int32_t n = -1;
  EXPECT_TRUE(index.Lookup({}, 4, &n).empty());
  EXPECT_EQ(n, 0);
  NgramIndex empty(1, 4);
  empty.Append(5);
  EXPECT_TRUE(empty.Lookup({}, 4).empty());
}

TEST(NgramProposeTest, RepetitiveTextGivesTheFullChain) {
  NgramIndex index(1, 8);
  const std::vector<int32_t> period = {4, 8, 15, 16, 23, 42};
  for (int r = 0; r < 3; ++r) index.Append(period);
  index.Append({4, 8});
  TokenTree t = NgramDrafter::ProposeTree(index, Shape("chain:6"));
  ASSERT_TRUE(t.Validate(64).ok());
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{8, 15, 16, 23, 42, 4, 8}));
  EXPECT_TRUE(t.draft.empty());
}

TEST(NgramProposeTest, ShapeBoundsTheTreeAndMissingCandidatesShrinkIt) {
  NgramIndex index(1, 8);
  index.Append({1, 2, 1, 3, 1, 4, 1, 5, 1});
  // After 1: 2, 3, 4, 5; the shape allows 3 at level 1 and 2 below each.
  TokenTree t = NgramDrafter::ProposeTree(index, Shape("3,2"));
  ASSERT_TRUE(t.Validate(16).ok());
  EXPECT_EQ(t.Children(0).size(), 3u);
  EXPECT_LE(t.num_nodes(), Shape("3,2").NumNodes());
  for (int32_t c : t.Children(0)) {
    // After "1 x" only "1" ever followed (and after "1 5" nothing: only 1-grams match).
    EXPECT_LE(t.Children(c).size(), 1u) << "node " << c;
  }
  NgramIndex fresh(2, 8);
  fresh.Append({1, 2, 3});
  TokenTree root_only = NgramDrafter::ProposeTree(fresh, Shape("3,2,2"));
  EXPECT_EQ(root_only.num_nodes(), 1);
  EXPECT_EQ(root_only.tokens[0], 3);
}

TEST(NgramDrafterTest, ValidatesOptions) {
  EXPECT_FALSE(NgramDrafter::Create(Options(0)).ok());
  DrafterOptions o = Options();
  o.ngram_min = 3;
  o.ngram_max = 2;
  EXPECT_FALSE(NgramDrafter::Create(o).ok());
  EXPECT_TRUE(NgramDrafter::Create(Options()).ok());
  o = Options();
  o.model_dir = "";
  EXPECT_TRUE(o.Validate().ok()) << "ngram needs no model";
}

TEST(NgramDrafterTest, FollowsTheDrafterContract) {
  auto d = *NgramDrafter::Create(Options());
  EXPECT_EQ(d->kind(), "ngram");
  auto st = d->Open({{1, {1, 2, 3, 1, 2}}, {1, {}}, {2, {99}}});
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(st[1].code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(st[2].code(), absl::StatusCode::kInvalidArgument);
  DraftSpec s;
  s.id = 1;
  s.step = 1;
  s.new_tokens = {3};
  s.shape = Shape("chain:4");
  auto out = d->Draft({s, s});
  ASSERT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kInvalidArgument);  // id twice
  // History 1 2 3 1 2 3: the chain continues the period.
  EXPECT_EQ(out[0].tree.tokens, (std::vector<int32_t>{3, 1, 2, 3, 1}));
  out = d->Draft({s});
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kAborted);  // repeated step
  s.step = 2;
  s.new_tokens = {16};
  EXPECT_EQ(d->Draft({s})[0].status.code(), absl::StatusCode::kInvalidArgument);
  s.new_tokens = {1, 2};
  s.shape = Shape("8,8");
  EXPECT_EQ(d->Draft({s})[0].status.code(), absl::StatusCode::kInvalidArgument);  // 73 nodes
  s.shape = Shape("2,2");
  EXPECT_TRUE(d->Draft({s})[0].status.ok());
  s.id = 9;
  EXPECT_EQ(d->Draft({s})[0].status.code(), absl::StatusCode::kNotFound);
  for (uint64_t id = 2; id <= 4; ++id) EXPECT_TRUE(d->Open({{id, {}}})[0].ok());
  EXPECT_EQ(d->Open({{5, {}}})[0].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(d->Stats().num_sequences, 4);
  EXPECT_EQ(d->Release({1, 1, 2}), 2);
  EXPECT_EQ(d->Stats().slots_free, 2);
  EXPECT_EQ(d->ReleaseExpired(), 0);  // no lease
}

TEST(NgramDrafterTest, LeasesExpire) {
  DrafterOptions o = Options();
  o.sequence_lease = absl::Milliseconds(1);
  auto d = *NgramDrafter::Create(o);
  ASSERT_TRUE(d->Open({{1, {1, 2}}})[0].ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(d->ReleaseExpired(), 1);
  EXPECT_EQ(d->Stats().num_sequences, 0);
}

// ---------------------------------------------------------------- chi-square
//
// A target over V tokens whose next-token logits depend on the last token
// only. The n-gram tree (shape 3,2) is fixed by the history; each trial
// verifies it with a fresh seed and records the first two emitted tokens
// (drawing the second from the target when the step emitted one). Exact
// verification gives P(x, y) = p_root(x) · p_x(y).

constexpr int32_t kV = 8;
constexpr int kTrials = 60000;

struct ChiEnv {
  std::vector<float> rows;  // [kV, kV]: row t = logits after token t
  TokenTree tree;
};

ChiEnv MakeChiEnv() {
  std::mt19937 rng(77);
  std::normal_distribution<float> logit(0.0f, 1.2f);
  ChiEnv e;
  e.rows.resize(kV * kV);
  for (float& x : e.rows) x = logit(rng);
  NgramIndex index(1, 1);
  index.Append({0, 1, 0, 2, 0, 3, 0, 1, 0});  // after 0: 1 (twice), 3, 2; after x: 0
  e.tree = NgramDrafter::ProposeTree(index, *TreeShape::Parse("3,2"));
  return e;
}

std::vector<double> Softmax(const float* l) {
  std::vector<double> p(kV);
  double m = *std::max_element(l, l + kV), z = 0.0;
  for (int i = 0; i < kV; ++i) z += (p[i] = std::exp(l[i] - m));
  for (double& x : p) x /= z;
  return p;
}

ChiSquareResult RunChi(const TokenTree& tree, const ChiEnv& e, VerifyMode mode) {
  SamplingParams params;
  params.temperature = 1.0f;
  std::vector<float> logits;
  for (int32_t tok : tree.tokens) {
    logits.insert(logits.end(), e.rows.begin() + tok * kV, e.rows.begin() + (tok + 1) * kV);
  }
  std::mt19937_64 rng(5);
  std::vector<int64_t> observed(kV * kV, 0);
  for (int trial = 0; trial < kTrials; ++trial) {
    VerifyResult r = Verify(mode, tree, logits.data(), kV, params,
                            RngKey{123, RngStream::kVerify, static_cast<uint32_t>(trial), 0});
    std::vector<int32_t> emitted = r.NewTokens();
    if (emitted.size() < 2) {
      std::vector<double> p = Softmax(&e.rows[emitted[0] * kV]);
      std::discrete_distribution<int> next(p.begin(), p.end());
      emitted.push_back(next(rng));
    }
    ++observed[emitted[0] * kV + emitted[1]];
  }
  std::vector<double> expected(kV * kV);
  std::vector<double> p_root = Softmax(&e.rows[tree.tokens[0] * kV]);
  for (int x = 0; x < kV; ++x) {
    std::vector<double> p_x = Softmax(&e.rows[x * kV]);
    for (int y = 0; y < kV; ++y) expected[x * kV + y] = p_root[x] * p_x[y];
  }
  return ChiSquareTest(observed, expected);
}

TEST(NgramChiSquareTest, TreesWithoutQAreVerifiedExactly) {
  ChiEnv e = MakeChiEnv();
  ASSERT_TRUE(e.tree.Validate(kV).ok());
  ASSERT_EQ(e.tree.Children(0).size(), 3u) << "the test needs a branching tree";
  for (VerifyMode mode : {VerifyMode::kMultiRound, VerifyMode::kTargetSampling}) {
    ChiSquareResult r = RunChi(e.tree, e, mode);
    EXPECT_GT(r.p_value, 1e-3) << VerifyModeName(mode) << ": " << r.ToString();
  }
}

// Power: claiming a count-based q for deterministically chosen children makes
// multi-round verification biased, and the test sees it.
TEST(NgramChiSquareTest, CountBasedQOnTopCountChildrenFails) {
  ChiEnv e = MakeChiEnv();
  TokenTree t = e.tree;
  t.draft.assign(t.tokens.size(), SparseDist{});
  for (int32_t v = 0; v < t.num_nodes(); ++v) {
    std::vector<int32_t> ch = t.Children(v);
    for (size_t i = 0; i < ch.size(); ++i) {
      t.draft[v].tokens.push_back(t.tokens[ch[i]]);
      // Counts-like, most mass on the first child.
      t.draft[v].probs.push_back(static_cast<float>(ch.size() - i));
    }
    float z = 0.0f;
    for (float p : t.draft[v].probs) z += p;
    for (float& p : t.draft[v].probs) p /= z;
  }
  ASSERT_TRUE(t.Validate(kV).ok());
  ChiSquareResult r = RunChi(t, e, VerifyMode::kMultiRound);
  EXPECT_LT(r.p_value, 1e-6) << r.ToString();
}

}  // namespace
}  // namespace treespec
