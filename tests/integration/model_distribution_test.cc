// Lossless sampling on real trained model pairs: the demo target (Llama,
// vocabulary 2048) and the demo Mamba drafter distilled from it, and the demo
// Mamba-2 + attention hybrid target (models/demo/hybrid-target) with the
// Mamba drafter distilled from it (hybrid-mamba-drafter). For a fixed
// prompt, each trial drafts a (3,2) tree — children sampled without
// replacement from the drafter's q (top-32 at the request temperature, Philox
// stream kDraft keyed by the trial's seed), exactly as the Mamba drafter does
// (the test checks this against the real drafter for the first trials) — and
// verifies it with the worker's rule on the target's logits of every node.
// The drafter's q and the target's logits depend only on the context, so they
// are computed once per context (by the real drafter and the target model).
// The first two emitted tokens must follow p(x)·p(y | x) of the target's own
// sampling: chi-square over 10^5 trials, p > 0.001, for multi-round
// speculative sampling and target sampling; a deliberately wrong acceptance
// rule must fail the same test (its power), and the drafts must be accepted
// often enough for the test to mean something. Top-k / top-p: the Llama pair
// only.
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/spec/philox.h"
#include "core/spec/verify.h"
#include "drafter_service/drafter.h"
#include "gtest/gtest.h"
#include "tests/integration/two_token_trials.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"

namespace treespec {
namespace {

constexpr int kTrials = 100000;
constexpr int kDrafterChecks = 64;  // trials also drafted by the real drafter
const std::vector<int32_t> kPrompt = {1, 362, 363, 261, 350, 1985, 351, 281, 261, 359};

std::string Demo(const std::string& name) { return testing::SourceDir() + "/models/demo/" + name; }

using testing::Rule;
using Outcome = testing::TwoTokenOutcome;

// A target and a Mamba drafter of its vocabulary (models/demo/<dir>).
struct ModelPair {
  std::string name, target, drafter;
};
void PrintTo(const ModelPair& p, std::ostream* os) { *os << p.target << " + " << p.drafter; }
std::string PairName(const ::testing::TestParamInfo<ModelPair>& info) { return info.param.name; }
const ModelPair kLlamaPair = {"llama", "target", "mamba-drafter"};
const ModelPair kHybridPair = {"hybrid", "hybrid-target", "hybrid-mamba-drafter"};

class ModelDistributionTest : public ::testing::TestWithParam<ModelPair> {
 protected:
  void SetUp() override {
    auto target = LocalModel::Load(Demo(GetParam().target), "cpu", 1, 64);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = std::move(*target);
    V_ = target_->vocab_size();
    backend_ = CreateCpuBackend();
    DrafterOptions o;
    o.kind = "mamba";
    o.model_dir = Demo(GetParam().drafter);
    o.max_sequences = 4;
    o.max_tree_nodes = 16;
    auto drafter = CreateDrafter(o, backend_.get());
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    drafter_ = std::move(*drafter);
  }

  // Target next-token logits after kPrompt + suffix.
  const std::vector<float>& TargetAfter(const std::vector<int32_t>& suffix) {
    auto it = target_cache_.find(suffix);
    if (it != target_cache_.end()) return it->second;
    std::vector<int32_t> ids = kPrompt;
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    std::vector<float> all;
    EXPECT_TRUE(target_->AllLogits(ids, &all).ok());
    return target_cache_[suffix] = std::vector<float>(all.end() - V_, all.end());
  }

  // The drafter's q after kPrompt + suffix, from the real drafter: a sequence
  // holding everything but the last token drafts one child from it.
  const SparseDist& DraftAfter(const std::vector<int32_t>& suffix, float temperature) {
    auto key = std::make_pair(suffix, temperature);
    auto it = q_cache_.find(key);
    if (it != q_cache_.end()) return it->second;
    std::vector<int32_t> ctx = kPrompt;
    ctx.insert(ctx.end(), suffix.begin(), suffix.end());
    const uint64_t id = next_id_++;
    EXPECT_TRUE(drafter_->Open({{id, std::vector<int32_t>(ctx.begin(), ctx.end() - 1)}})[0].ok());
    DraftSpec d;
    d.id = id;
    d.step = 1;
    d.new_tokens = {ctx.back()};
    d.shape = *TreeShape::Parse("1");
    d.temperature = temperature;
    DraftOutcome out = drafter_->Draft({d})[0];
    drafter_->Release({id});
    EXPECT_TRUE(out.status.ok()) << out.status;
    return q_cache_[key] = out.tree.draft.empty() ? SparseDist() : out.tree.draft[0];
  }

  // The (3,2) tree the Mamba drafter drafts for `seed`: children of node v drawn
  // without replacement from q_v with Uniform({seed, kDraft, step 1, v}, j).
  TokenTree DraftTree(uint64_t seed, float temperature) {
    TokenTree tree = TokenTree::Root(kPrompt.back());
    auto expand = [&](int32_t node, const std::vector<int32_t>& suffix, int n) {
      const SparseDist& q = DraftAfter(suffix, temperature);
      tree.draft.resize(tree.tokens.size());
      tree.draft[node] = q;
      SparseDist rest = q;
      std::vector<int32_t> children;
      for (int j = 0; j < n; ++j) {
        double mass = 0.0;
        for (float p : rest.probs) mass += p;
        if (mass <= 0.0) break;
        const int32_t t = SampleSparse(
            rest, Uniform(RngKey{seed, RngStream::kDraft, 1, static_cast<uint32_t>(node)},
                          static_cast<uint32_t>(j)));
        children.push_back(t);
        for (size_t k = 0; k < rest.tokens.size(); ++k) {
          if (rest.tokens[k] == t) rest.probs[k] = 0.0f;
        }
      }
      return children;
    };
    for (int32_t x : expand(0, {}, 3)) tree.AddNode(0, x);
    const int32_t level1 = static_cast<int32_t>(tree.num_nodes());
    for (int32_t c = 1; c < level1; ++c) {
      for (int32_t y : expand(c, {tree.tokens[c]}, 2)) tree.AddNode(c, y);
    }
    tree.draft.resize(tree.tokens.size());
    return tree;
  }

  TokenTree RealDrafterTree(uint64_t seed, float temperature) {
    const uint64_t id = next_id_++;
    EXPECT_TRUE(drafter_->Open({{id, std::vector<int32_t>(kPrompt.begin(), kPrompt.end() - 1)}})[0].ok());
    DraftSpec d;
    d.id = id;
    d.step = 1;
    d.new_tokens = {kPrompt.back()};
    d.shape = *TreeShape::Parse("3,2");
    d.temperature = temperature;
    d.seed = seed;
    DraftOutcome out = drafter_->Draft({d})[0];
    drafter_->Release({id});
    EXPECT_TRUE(out.status.ok()) << out.status;
    return out.tree;
  }

  Outcome Run(const SamplingParams& params, const Rule& rule) {
    auto draft = [&](int trial, uint64_t seed) {
      TokenTree tree = DraftTree(seed, params.temperature);
      if (trial < kDrafterChecks) {
        const TokenTree real = RealDrafterTree(seed, params.temperature);
        EXPECT_EQ(tree.tokens, real.tokens) << "trial " << trial;
        EXPECT_EQ(tree.parents, real.parents) << "trial " << trial;
      }
      return tree;
    };
    return testing::RunTwoTokenTrials(
        V_, kTrials, 0xD0C0, params, rule, draft,
        [&](const std::vector<int32_t>& suffix) -> const std::vector<float>& {
          return TargetAfter(suffix);
        });
  }

  std::unique_ptr<LocalModel> target_;
  int64_t V_ = 0;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Drafter> drafter_;
  uint64_t next_id_ = 1;
  std::map<std::vector<int32_t>, std::vector<float>> target_cache_;
  std::map<std::pair<std::vector<int32_t>, float>, SparseDist> q_cache_;
};

SamplingParams Params(float t, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

Rule ModeRule(VerifyMode mode) {
  return [mode](const TokenTree& tree, const float* logits, int64_t vocab,
                const SamplingParams& params,
                RngKey key) { return Verify(mode, tree, logits, vocab, params, key); };
}

TEST_P(ModelDistributionTest, MultiRoundPreservesTheTargetDistribution) {
  const Outcome o = Run(Params(1.0f), ModeRule(VerifyMode::kMultiRound));
  EXPECT_GT(o.first.p_value, 1e-3) << o.first.ToString();
  EXPECT_GT(o.pair.p_value, 1e-3) << o.pair.ToString();
  EXPECT_GT(o.mean_accepted, 0.5) << "drafts were hardly ever accepted: a weak test";
  std::printf("[ measured ] %s multiround T=1: first %s; pair %s; mean accepted %.3f\n",
              GetParam().name.c_str(), o.first.ToString().c_str(), o.pair.ToString().c_str(),
              o.mean_accepted);
}

class ModelDistributionTopKTest : public ModelDistributionTest {};

TEST_P(ModelDistributionTopKTest, MultiRoundWithTopKAndTopP) {
  const Outcome o = Run(Params(1.2f, 50, 0.95f), ModeRule(VerifyMode::kMultiRound));
  EXPECT_GT(o.first.p_value, 1e-3) << o.first.ToString();
  EXPECT_GT(o.pair.p_value, 1e-3) << o.pair.ToString();
  std::printf("[ measured ] %s multiround T=1.2 top-k 50 top-p 0.95: first %s; pair %s\n",
              GetParam().name.c_str(), o.first.ToString().c_str(), o.pair.ToString().c_str());
}

TEST_P(ModelDistributionTest, TargetSamplingPreservesTheTargetDistribution) {
  const Outcome o = Run(Params(1.0f), ModeRule(VerifyMode::kTargetSampling));
  EXPECT_GT(o.first.p_value, 1e-3) << o.first.ToString();
  EXPECT_GT(o.pair.p_value, 1e-3) << o.pair.ToString();
  EXPECT_GT(o.mean_accepted, 0.5) << "drafts were hardly ever accepted: a weak test";
  std::printf("[ measured ] %s target sampling T=1: first %s; pair %s; mean accepted %.3f\n",
              GetParam().name.c_str(), o.first.ToString().c_str(), o.pair.ToString().c_str(),
              o.mean_accepted);
}

// The classic mistake: accept a child with probability min(1, p/q) but, when
// all children are rejected, sample the bonus from p instead of the residual
// norm(max(0, p - q)). The same test must catch it.
TEST_P(ModelDistributionTest, AWrongAcceptanceRuleFailsTheSameTest) {
  Rule wrong = [](const TokenTree& tree, const float* logits, int64_t vocab,
                  const SamplingParams& params, RngKey key) {
    VerifyResult r = Verify(VerifyMode::kMultiRound, tree, logits, vocab, params, key);
    const int32_t last = r.path.back();
    if (!tree.Children(last).empty() && r.depths.back().accepted_rank < 0) {
      std::vector<float> p;
      ProcessLogits(logits + last * vocab, vocab, params, &p);
      r.bonus_token = SampleDense(p, Uniform({key.seed, RngStream::kVerify, key.step, 999}, 0));
    }
    return r;
  };
  const Outcome o = Run(Params(1.0f), wrong);
  EXPECT_LT(std::min(o.first.p_value, o.pair.p_value), 1e-6)
      << "first " << o.first.ToString() << " pair " << o.pair.ToString();
}

INSTANTIATE_TEST_SUITE_P(Pairs, ModelDistributionTest, ::testing::Values(kLlamaPair, kHybridPair),
                         PairName);
INSTANTIATE_TEST_SUITE_P(Pairs, ModelDistributionTopKTest, ::testing::Values(kLlamaPair),
                         PairName);

}  // namespace
}  // namespace treespec
