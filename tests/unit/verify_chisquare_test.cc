// Sampling verification must emit tokens distributed exactly as the target's
// own sampling (DESIGN.md, "What is checked against whom"). A small-vocabulary
// "model" with random target and draft logits drafts depth-2 trees without
// replacement from top-k draft distributions (the drafter contract in
// verify.h); chi-square tests then compare the first, first two and first
// three emitted tokens with p_root(x), p_root(x)·p_x(y) and
// p_root(x)·p_x(y)·p_xy(z). When a step emits fewer tokens than a test needs,
// the next tokens are drawn from the target directly — exactly what the next
// step (or plain decoding) would do. Deliberately wrong rules must fail the
// same tests, which shows the tests have the power to catch real bugs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/spec/verify.h"
#include "gtest/gtest.h"
#include "tests/testing/chi_square.h"

namespace treespec {
namespace {

using ::treespec::testing::ChiSquareResult;
using ::treespec::testing::ChiSquareTest;

constexpr int32_t kV = 12;
constexpr int kTrials = 100000;
constexpr double kPassP = 1e-3;
constexpr double kFailP = 1e-6;

struct Variant {
  std::string name;
  SamplingParams target;
  int draft_k = 6;
  float draft_temperature = 1.0f;
  int n1 = 3, n2 = 2;  // tree shape (N1, N2)
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

SamplingParams Params(float t, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

std::vector<Variant> Variants() {
  return {
      {"t1", Params(1.0f), 6, 1.0f, 3, 2},
      {"t07_topk5", Params(0.7f, 5), 6, 1.0f, 3, 2},
      {"t13_topp08", Params(1.3f, 0, 0.8f), 8, 1.2f, 3, 2},
      {"topk4_topp09", Params(1.0f, 4, 0.9f), 4, 0.8f, 3, 2},
      // q has 2 tokens: the root's 3 slots exhaust it (2 children), as do the
      // depth-1 nodes' 2 children.
      {"q_exhausted", Params(1.0f), 2, 1.0f, 3, 2},
      {"flat_q_sharp_p", Params(0.5f), kV, 1.5f, 4, 3},
  };
}

// Target and draft "models" whose next-token logits depend on the last two
// tokens at most: target rows for the root, after x, and after (x, y); draft
// rows for the root and after x (the drafter sees the same contexts).
struct Env {
  std::vector<float> target_root, target_x, target_xy;  // [V], [V*V], [V*V*V]
  std::vector<float> draft_root, draft_x;               // [V], [V*V]
};

Env MakeEnv(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit(0.0f, 1.5f), noise(0.0f, 1.0f);
  Env e;
  auto fill = [&](std::vector<float>* v, size_t n) {
    v->resize(n);
    for (float& x : *v) x = logit(rng);
  };
  fill(&e.target_root, kV);
  fill(&e.target_x, kV * kV);
  fill(&e.target_xy, kV * kV * kV);
  // Drafts correlate with the target (so multi-token acceptance is common) but differ.
  e.draft_root = e.target_root;
  for (float& x : e.draft_root) x += noise(rng);
  e.draft_x = e.target_x;
  for (float& x : e.draft_x) x += noise(rng);
  return e;
}

// Draws n children without replacement from q, in order (the drafter contract).
std::vector<int32_t> DrawWithoutReplacement(const SparseDist& q, int n, RngKey key) {
  SparseDist rest = q;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    double mass = 0.0;
    for (float p : rest.probs) mass += p;
    if (!(mass > 0.0)) break;
    const int32_t t = SampleSparse(rest, Uniform(key, static_cast<uint32_t>(i)));
    out.push_back(t);
    for (size_t j = 0; j < rest.tokens.size(); ++j) {
      if (rest.tokens[j] == t) rest.probs[j] = 0.0f;
    }
  }
  return out;
}

using VerifyFn = std::function<VerifyResult(const TokenTree&, const float* logits,
                                            const SamplingParams&, RngKey)>;

struct Counts {
  std::vector<int64_t> first = std::vector<int64_t>(kV, 0);
  std::vector<int64_t> pair = std::vector<int64_t>(kV * kV, 0);
  std::vector<int64_t> triple = std::vector<int64_t>(kV * kV * kV, 0);
  double mean_accepted = 0.0;
};

struct Expected {
  std::vector<double> first, pair, triple;
  std::vector<float> p_root, p_x, p_xy;  // processed target rows
};

Expected MakeExpected(const Env& env, const SamplingParams& params) {
  Expected ex;
  std::vector<float> row;
  ProcessLogits(env.target_root.data(), kV, params, &ex.p_root);
  for (int32_t x = 0; x < kV; ++x) {
    ProcessLogits(env.target_x.data() + x * kV, kV, params, &row);
    ex.p_x.insert(ex.p_x.end(), row.begin(), row.end());
    for (int32_t y = 0; y < kV; ++y) {
      ProcessLogits(env.target_xy.data() + (x * kV + y) * kV, kV, params, &row);
      ex.p_xy.insert(ex.p_xy.end(), row.begin(), row.end());
    }
  }
  for (int32_t x = 0; x < kV; ++x) {
    ex.first.push_back(ex.p_root[x]);
    for (int32_t y = 0; y < kV; ++y) {
      const double pxy = static_cast<double>(ex.p_root[x]) * ex.p_x[x * kV + y];
      ex.pair.push_back(pxy);
      for (int32_t z = 0; z < kV; ++z) ex.triple.push_back(pxy * ex.p_xy[(x * kV + y) * kV + z]);
    }
  }
  return ex;
}

Counts RunTrials(const Env& env, const Variant& variant, const Expected& ex,
                 const VerifyFn& verify, int num_trials) {
  const SparseDist q_root =
      TopKDist(env.draft_root.data(), kV, variant.draft_k, variant.draft_temperature);
  std::vector<SparseDist> q_x;
  for (int32_t x = 0; x < kV; ++x) {
    q_x.push_back(
        TopKDist(env.draft_x.data() + x * kV, kV, variant.draft_k, variant.draft_temperature));
  }
  Counts counts;
  int64_t accepted = 0;
  std::vector<float> logits;
  for (int trial = 0; trial < num_trials; ++trial) {
    const uint64_t seed = 0x5EED0000ull + static_cast<uint64_t>(trial % 1009);
    const uint32_t step = static_cast<uint32_t>(trial);
    const RngKey draft_key{seed, RngStream::kDraft, step, 0};

    // Root token 0 stands for "the prefix"; its row is target_root.
    TokenTree tree = TokenTree::Root(0);
    tree.draft.resize(1);
    tree.draft[0] = q_root;
    for (int32_t x : DrawWithoutReplacement(q_root, variant.n1, draft_key)) tree.AddNode(0, x);
    const int32_t num_depth1 = static_cast<int32_t>(tree.num_nodes());
    for (int32_t c = 1; c < num_depth1; ++c) {
      const int32_t x = tree.tokens[c];
      tree.draft[c] = q_x[x];
      RngKey key = draft_key;
      key.node = static_cast<uint32_t>(c);
      for (int32_t y : DrawWithoutReplacement(q_x[x], variant.n2, key)) tree.AddNode(c, y);
    }
    logits.clear();
    const std::vector<int32_t> depths = tree.Depths();
    for (int32_t v = 0; v < tree.num_nodes(); ++v) {
      const float* row = env.target_root.data();
      if (depths[v] == 1) row = env.target_x.data() + tree.tokens[v] * kV;
      if (depths[v] == 2) {
        row = env.target_xy.data() + (tree.tokens[tree.parents[v]] * kV + tree.tokens[v]) * kV;
      }
      logits.insert(logits.end(), row, row + kV);
    }

    const VerifyResult r = verify(tree, logits.data(), variant.target, RngKey{seed, {}, step, 0});
    accepted += r.num_accepted();
    std::vector<int32_t> out = r.NewTokens();
    // Continue with plain target sampling where the step emitted too few.
    const RngKey cont{seed, RngStream::kSample, step, 0};
    if (out.size() < 2) {
      std::vector<float> p(ex.p_x.begin() + out[0] * kV, ex.p_x.begin() + (out[0] + 1) * kV);
      out.push_back(SampleDense(p, Uniform(cont, 0)));
    }
    if (out.size() < 3) {
      const int64_t ctx = (out[0] * kV + out[1]) * kV;
      std::vector<float> p(ex.p_xy.begin() + ctx, ex.p_xy.begin() + ctx + kV);
      out.push_back(SampleDense(p, Uniform(cont, 1)));
    }
    ++counts.first[out[0]];
    ++counts.pair[out[0] * kV + out[1]];
    ++counts.triple[(out[0] * kV + out[1]) * kV + out[2]];
  }
  counts.mean_accepted = static_cast<double>(accepted) / num_trials;
  return counts;
}

struct Outcome {
  ChiSquareResult first, pair, triple;
  double mean_accepted = 0.0;
  double min_p() const { return std::min({first.p_value, pair.p_value, triple.p_value}); }
};

Outcome RunChiSquare(const Variant& variant, const VerifyFn& verify, uint32_t env_seed = 1234) {
  const Env env = MakeEnv(env_seed);
  const Expected ex = MakeExpected(env, variant.target);
  const Counts c = RunTrials(env, variant, ex, verify, kTrials);
  Outcome o;
  o.first = ChiSquareTest(c.first, ex.first);
  o.pair = ChiSquareTest(c.pair, ex.pair);
  o.triple = ChiSquareTest(c.triple, ex.triple);
  o.mean_accepted = c.mean_accepted;
  return o;
}

std::string Describe(const Outcome& o) {
  return absl::StrCat("first: ", o.first.ToString(), "\n  pair: ", o.pair.ToString(),
                      "\n  triple: ", o.triple.ToString(),
                      "\n  mean accepted draft tokens: ", o.mean_accepted);
}

VerifyFn ModeFn(VerifyMode mode) {
  return [mode](const TokenTree& tree, const float* logits, const SamplingParams& params,
                RngKey key) { return Verify(mode, tree, logits, kV, params, key); };
}

TEST(ChiSquareHelperTest, KnownStatisticPoolingAndImpossibleCategories) {
  // ((10-20)^2 + 0 + (30-20)^2) / 20 = 10 with 2 dof: p = exp(-5).
  ChiSquareResult r = ChiSquareTest({10, 20, 30}, {1, 1, 1});
  EXPECT_NEAR(r.statistic, 10.0, 1e-9);
  EXPECT_EQ(r.dof, 2);
  EXPECT_NEAR(r.p_value, std::exp(-5.0), 1e-9);
  // Expected counts 0.5 and 0.5 pool into one bin of 1, still < 5, so it
  // merges into the smallest other bin: 2 bins, 1 dof.
  r = ChiSquareTest({49, 50, 1, 0}, {0.495, 0.495, 0.005, 0.005});
  EXPECT_EQ(r.num_bins, 2);
  EXPECT_EQ(r.dof, 1);
  EXPECT_GT(r.p_value, 0.5);
  r = ChiSquareTest({50, 49, 1}, {0.5, 0.5, 0.0});
  EXPECT_TRUE(r.impossible);
  EXPECT_EQ(r.p_value, 0.0);
}

class VerifyChiSquareTest
    : public ::testing::TestWithParam<std::tuple<Variant, VerifyMode>> {};

TEST_P(VerifyChiSquareTest, EmittedTokensFollowTheTarget) {
  const auto& [variant, mode] = GetParam();
  ASSERT_TRUE(ValidateVerifyMode(mode, variant.target).ok());
  const Outcome o = RunChiSquare(variant, ModeFn(mode));
  std::printf("[ chi2 ] %s/%s\n  %s\n", variant.name.c_str(),
              std::string(VerifyModeName(mode)).c_str(), Describe(o).c_str());
  EXPECT_GT(o.first.p_value, kPassP) << Describe(o);
  EXPECT_GT(o.pair.p_value, kPassP) << Describe(o);
  EXPECT_GT(o.triple.p_value, kPassP) << Describe(o);
  EXPECT_GT(o.mean_accepted, 0.3) << "the test needs multi-token acceptance to have power";
}

INSTANTIATE_TEST_SUITE_P(
    Rules, VerifyChiSquareTest,
    ::testing::Combine(::testing::ValuesIn(Variants()),
                       ::testing::Values(VerifyMode::kMultiRound, VerifyMode::kTargetSampling)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_",
                          std::string(VerifyModeName(std::get<1>(info.param))));
    });

// A second, independent implementation of multi-round sampling with
// switchable bugs, each of which a careless implementation could contain.
enum class Bug {
  kNone,
  kBonusFromP,       // after rejections, bonus ~ p instead of the residual
  kNoDraftRemoval,   // test later children against q, not q without earlier picks
  kParentRow,        // score a non-root node with its parent's row
};

VerifyResult BuggyMultiRound(Bug bug, const TokenTree& tree, const float* logits,
                             const SamplingParams& params, RngKey key) {
  key.stream = RngStream::kVerify;
  const auto children = tree.ChildLists();
  VerifyResult r;
  int32_t v = 0;
  while (true) {
    r.path.push_back(v);
    key.node = static_cast<uint32_t>(v);
    const int32_t row_node = (bug == Bug::kParentRow && v > 0) ? tree.parents[v] : v;
    std::vector<double> p(kV), p0(kV);
    {
      std::vector<float> pf;
      ProcessLogits(logits + row_node * kV, kV, params, &pf);
      for (int t = 0; t < kV; ++t) p[t] = p0[t] = pf[t];
    }
    std::vector<double> q(kV, 0.0);
    if (tree.has_draft(v)) {
      for (size_t j = 0; j < tree.draft[v].tokens.size(); ++j) {
        q[tree.draft[v].tokens[j]] = tree.draft[v].probs[j];
      }
    }
    int32_t next = -1;
    for (size_t i = 0; i < children[v].size() && next < 0; ++i) {
      const int32_t x = tree.tokens[children[v][i]];
      double qs = 0.0, ps = 0.0;
      for (int t = 0; t < kV; ++t) qs += q[t], ps += p[t];
      if (Uniform(key, static_cast<uint32_t>(i + 1)) < (p[x] / ps) / (q[x] / qs)) {
        next = children[v][i];
        break;
      }
      for (int t = 0; t < kV; ++t) p[t] = std::max(0.0, p[t] / ps - q[t] / qs);
      if (bug != Bug::kNoDraftRemoval) q[x] = 0.0;
    }
    if (next >= 0) {
      r.accepted_tokens.push_back(tree.tokens[next]);
      v = next;
      continue;
    }
    const std::vector<double>& dist = bug == Bug::kBonusFromP ? p0 : p;
    std::vector<float> pf(dist.begin(), dist.end());
    r.bonus_token = SampleDense(pf, Uniform(key, 0));
    return r;
  }
}

VerifyFn BuggyFn(Bug bug) {
  return [bug](const TokenTree& tree, const float* logits, const SamplingParams& params,
               RngKey key) { return BuggyMultiRound(bug, tree, logits, params, key); };
}

TEST(VerifyChiSquarePowerTest, ReferenceImplementationPasses) {
  const Outcome o = RunChiSquare(Variants()[0], BuggyFn(Bug::kNone));
  std::printf("[ chi2 ] reference multiround\n  %s\n", Describe(o).c_str());
  EXPECT_GT(o.min_p(), kPassP) << Describe(o);
}

TEST(VerifyChiSquarePowerTest, BonusFromTargetInsteadOfResidualFails) {
  const Outcome o = RunChiSquare(Variants()[0], BuggyFn(Bug::kBonusFromP));
  std::printf("[ chi2 ] bug: bonus from p\n  %s\n", Describe(o).c_str());
  EXPECT_LT(o.first.p_value, kFailP) << Describe(o);
}

TEST(VerifyChiSquarePowerTest, WithReplacementFormulaOnWithoutReplacementDraftsFails) {
  const Outcome o = RunChiSquare(Variants()[0], BuggyFn(Bug::kNoDraftRemoval));
  std::printf("[ chi2 ] bug: q not updated after a rejection\n  %s\n", Describe(o).c_str());
  EXPECT_LT(o.min_p(), kFailP) << Describe(o);
}

TEST(VerifyChiSquarePowerTest, ParentRowFailsOnlyBeyondTheFirstToken) {
  const Outcome o = RunChiSquare(Variants()[0], BuggyFn(Bug::kParentRow));
  std::printf("[ chi2 ] bug: parent's row at child\n  %s\n", Describe(o).c_str());
  EXPECT_GT(o.first.p_value, kPassP) << Describe(o);
  EXPECT_LT(o.pair.p_value, kFailP) << Describe(o);
}

}  // namespace
}  // namespace treespec
