// Lossless sampling with an EAGLE head's q on the demo pair (the demo target
// and models/demo/eagle-head, eagle3-head): as model_distribution_test does
// for the Mamba drafter, each trial drafts a (3,2) tree with children drawn
// without replacement from the head's q (top-32 at the request temperature,
// Philox stream kDraft keyed by the trial's seed) and verifies it with
// multi-round speculative sampling on the target's logits of every node. The
// first two emitted tokens must follow p(x)·p(y | x): chi-square over 10^5
// trials, p > 0.001.
//
// An EAGLE node's q depends on its path through the head's own outputs
// (depth 2 reads the root row's output h, not a target feature), so q is
// computed here with EagleHead exactly as the drafter does (root row from
// the target's features, each child row from h and its token), once per
// context, and the first trials check the trees against the real drafter.
#include <map>
#include <string>
#include <vector>

#include "core/model/eagle_head.h"
#include "core/model/llama.h"
#include "core/spec/philox.h"
#include "core/spec/sampling.h"
#include "core/spec/verify.h"
#include "drafter_service/drafter.h"
#include "gtest/gtest.h"
#include "tests/integration/two_token_trials.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"

namespace treespec {
namespace {

constexpr int kTrials = 100000;
constexpr int kDrafterChecks = 32;
constexpr float kTemperature = 1.0f;
const std::vector<int32_t> kPrompt = {1, 362, 363, 261, 350, 1985, 351, 281, 261, 359};

std::string Demo(const std::string& name) { return testing::SourceDir() + "/models/demo/" + name; }

class EagleDistributionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto target = LocalModel::Load(Demo("target"), "cpu", 1, 64);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = std::move(*target);
    V_ = target_->vocab_size();
    backend_ = CreateCpuBackend();
    auto head = EagleHead::Load(Demo(GetParam() + "-head"), Demo("target"), backend_.get(), 16, 16);
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
    DrafterOptions o;
    o.kind = GetParam();
    o.model_dir = Demo(GetParam() + "-head");
    o.target_dir = Demo("target");
    o.max_sequences = 2;
    o.max_tree_nodes = 16;
    auto drafter = CreateDrafter(o, backend_.get());
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    drafter_ = std::move(*drafter);
    ComputeFeatures();
    ComputeRootQ();
  }

  // The target's features of kPrompt's positions [kPrompt.size(), W].
  void ComputeFeatures() {
    auto model = LlamaModel::Load(Demo("target"), backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    auto cache = PagedKvCache::Create((*model)->KvOptions(8, 16), backend_.get());
    ASSERT_TRUE(cache.ok());
    const int64_t seq = (*cache)->CreateSequence();
    ASSERT_TRUE((*cache)->Reserve(seq, 64).ok());
    ForwardOptions fo_opts;
    fo_opts.hidden_layers = head_->info().target_layers;
    ForwardOutput fo;
    ASSERT_TRUE((*model)->Forward({{seq, kPrompt, {}, LogitsMode::kAll}}, cache->get(), &fo, fo_opts).ok());
    const int64_t n = kPrompt.size(), H = head_->info().hidden_size, K = fo_opts.hidden_layers.size();
    features_.assign(n * K * H, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t r = 0; r < n; ++r) {
        std::copy_n(fo.hidden.begin() + (k * n + r) * H, H, features_.begin() + (r * K + k) * H);
      }
    }
  }

  // The drafter's rows: committed (feature t, token t+1) for t < n-2, then the
  // root row (feature n-2, root); its output h feeds every child.
  void ComputeRootQ() {
    const int64_t n = kPrompt.size(), H = head_->info().hidden_size;
    std::vector<float> g;
    ASSERT_TRUE(head_->Fuse(features_, n, &g).ok());
    auto seq = head_->sequences()->Open(32);
    ASSERT_TRUE(seq.ok());
    seq_ = *seq;
    ForwardOutput fo;
    std::vector<float> rows(g.begin(), g.begin() + (n - 2) * H);
    ASSERT_TRUE(head_->Forward({{seq_, {kPrompt.begin() + 1, kPrompt.end() - 1}, {}, LogitsMode::kNone}},
                               rows, &fo).ok());
    ASSERT_TRUE(head_->sequences()->Commit(seq_, n - 2).ok());
    std::vector<float> root(g.begin() + (n - 2) * H, g.begin() + (n - 1) * H);
    ASSERT_TRUE(head_->Forward({{seq_, {kPrompt.back()}, {-1}, LogitsMode::kAll}}, root, &fo).ok());
    root_h_.assign(fo.hidden.begin(), fo.hidden.begin() + H);
    root_q_ = TopKDist(fo.logits.data(), V_, 32, kTemperature);
  }

  // q of the root's child carrying token x (node 1 of a tail [root, x]).
  const SparseDist& ChildQ(int32_t x) {
    auto it = child_q_.find(x);
    if (it != child_q_.end()) return it->second;
    ForwardOutput fo;
    EXPECT_TRUE(head_->Forward({{seq_, {x}, {-1, 0}, LogitsMode::kAll, 1}}, root_h_, &fo).ok());
    return child_q_[x] = TopKDist(fo.logits.data(), V_, 32, kTemperature);
  }

  const std::vector<float>& TargetAfter(const std::vector<int32_t>& suffix) {
    auto it = target_cache_.find(suffix);
    if (it != target_cache_.end()) return it->second;
    std::vector<int32_t> ids = kPrompt;
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    std::vector<float> all;
    EXPECT_TRUE(target_->AllLogits(ids, &all).ok());
    return target_cache_[suffix] = std::vector<float>(all.end() - V_, all.end());
  }

  // Children of `node` drawn without replacement from q, as the drafter does.
  static std::vector<int32_t> Sample(const SparseDist& q, uint64_t seed, int32_t node, int n) {
    SparseDist rest = q;
    std::vector<int32_t> out;
    for (int j = 0; j < n; ++j) {
      double mass = 0.0;
      for (float p : rest.probs) mass += p;
      if (mass <= 0.0) break;
      const int32_t t = SampleSparse(
          rest, Uniform(RngKey{seed, RngStream::kDraft, 1, static_cast<uint32_t>(node)},
                        static_cast<uint32_t>(j)));
      out.push_back(t);
      for (size_t k = 0; k < rest.tokens.size(); ++k) {
        if (rest.tokens[k] == t) rest.probs[k] = 0.0f;
      }
    }
    return out;
  }

  TokenTree DraftTree(uint64_t seed) {
    TokenTree tree = TokenTree::Root(kPrompt.back());
    tree.draft.resize(1);
    tree.draft[0] = root_q_;
    for (int32_t x : Sample(root_q_, seed, 0, 3)) tree.AddNode(0, x);
    const int32_t level1 = tree.num_nodes();
    for (int32_t c = 1; c < level1; ++c) {
      const SparseDist& q = ChildQ(tree.tokens[c]);
      tree.draft.resize(tree.tokens.size());
      tree.draft[c] = q;
      for (int32_t y : Sample(q, seed, c, 2)) tree.AddNode(c, y);
    }
    tree.draft.resize(tree.tokens.size());
    return tree;
  }

  TokenTree RealDrafterTree(uint64_t seed) {
    const uint64_t id = next_id_++;
    const int64_t n = kPrompt.size(), W = head_->info().feature_width();
    std::vector<float> open(features_.begin(), features_.begin() + (n - 2) * W);
    EXPECT_TRUE(drafter_->Open({{id, {kPrompt.begin(), kPrompt.end() - 1}, open}})[0].ok());
    DraftSpec d;
    d.id = id;
    d.step = 1;
    d.new_tokens = {kPrompt.back()};
    d.shape = *TreeShape::Parse("3,2");
    d.temperature = kTemperature;
    d.seed = seed;
    d.features.assign(features_.begin() + (n - 2) * W, features_.begin() + (n - 1) * W);
    DraftOutcome out = drafter_->Draft({d})[0];
    drafter_->Release({id});
    EXPECT_TRUE(out.status.ok()) << out.status;
    return out.tree;
  }

  std::unique_ptr<LocalModel> target_;
  int64_t V_ = 0;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<EagleHead> head_;
  std::unique_ptr<Drafter> drafter_;
  std::vector<float> features_, root_h_;
  int64_t seq_ = 0;
  SparseDist root_q_;
  std::map<int32_t, SparseDist> child_q_;
  std::map<std::vector<int32_t>, std::vector<float>> target_cache_;
  uint64_t next_id_ = 1;
};

TEST_P(EagleDistributionTest, MultiRoundWithTheHeadsQPreservesTheTargetDistribution) {
  SamplingParams params;
  params.temperature = kTemperature;
  auto draft = [&](int trial, uint64_t seed) {
    TokenTree tree = DraftTree(seed);
    if (trial < kDrafterChecks) {
      const TokenTree real = RealDrafterTree(seed);
      EXPECT_EQ(tree.tokens, real.tokens) << "trial " << trial;
      EXPECT_EQ(tree.parents, real.parents) << "trial " << trial;
    }
    return tree;
  };
  const testing::TwoTokenOutcome o = testing::RunTwoTokenTrials(
      V_, kTrials, 0xE6E0, params,
      [](const TokenTree& tree, const float* logits, int64_t vocab, const SamplingParams& sp,
         RngKey key) { return Verify(VerifyMode::kMultiRound, tree, logits, vocab, sp, key); },
      draft,
      [&](const std::vector<int32_t>& suffix) -> const std::vector<float>& {
        return TargetAfter(suffix);
      });
  const auto& f = o.first;
  const auto& p = o.pair;
  const double mean_accepted = o.mean_accepted;
  EXPECT_GT(f.p_value, 1e-3) << f.ToString();
  EXPECT_GT(p.p_value, 1e-3) << p.ToString();
  EXPECT_GT(mean_accepted, 0.5) << "drafts were hardly ever accepted: a weak test";
  std::printf("[ measured ] %s multiround T=1: first %s; pair %s; mean accepted %.3f\n",
              GetParam().c_str(), f.ToString().c_str(), p.ToString().c_str(), mean_accepted);
}

INSTANTIATE_TEST_SUITE_P(DemoHeads, EagleDistributionTest, ::testing::Values("eagle", "eagle3"));

}  // namespace
}  // namespace treespec
