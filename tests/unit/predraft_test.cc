// Pre-drafting (DrafterOptions::predraft, drafter_service/tree_drafter.h) on
// both drafter kinds (tiny_mamba, tiny_llama_gqa):
//  - a hit returns exactly the tree a drafter without pre-drafting returns
//    for the same request (tokens, parents, q), greedy and sampled, over
//    several steps of a batch where some outcomes are predicted and some not;
//  - hits, misses and unprepared drafts are counted;
//  - the outcome ranking puts the greedy chain's leaf and its top bonus first;
//  - releasing a sequence frees its prepared forks.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/backend.h"
#include "drafter_service/drafter.h"
#include "drafter_service/predraft_outcomes.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"

namespace treespec {
namespace {

struct Kind {
  std::string kind;
  std::string model;
};
void PrintTo(const Kind& k, std::ostream* os) { *os << k.kind; }

std::string ModelDir(const std::string& name) {
  return testing::SourceDir() + "/tests/fixtures/models/" + name;
}

class PredraftTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    auto local = LocalModel::Load(ModelDir(GetParam().model), "cpu", 1, 512);
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = std::move(*local);
  }
  std::unique_ptr<Drafter> Make(int predraft, bool sampled = true, int64_t max_batch = 0) {
    DrafterOptions o;
    o.kind = GetParam().kind;
    o.model_dir = ModelDir(GetParam().model);
    o.max_sequences = 4;
    o.max_tree_nodes = 32;
    o.max_context = 256;
    o.predraft = predraft;
    o.predraft_sampled = sampled;
    o.predraft_max_batch = max_batch;
    auto d = CreateDrafter(o, backend_.get());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }
  int32_t Argmax(const std::vector<int32_t>& history) {
    std::vector<float> all;
    EXPECT_TRUE(local_->AllLogits(history, &all).ok());
    const int64_t V = local_->vocab_size();
    int32_t best = 0;
    for (int32_t t = 1; t < V; ++t) {
      if (all[all.size() - V + t] > all[all.size() - V + best]) best = t;
    }
    return best;
  }

  // Runs `steps` steps of 3 sequences on a pre-drafting and a plain drafter
  // and checks every tree is the same. Sequence i accepts, at odd (i + step),
  // the first-child chain with the drafter's own next token as bonus (a
  // likely outcome) and otherwise just a bonus token nobody predicts.
  void RunBoth(float temperature, int steps, DrafterStats* stats) {
    std::unique_ptr<Drafter> pre = Make(4);
    std::unique_ptr<Drafter> plain = Make(0);
    ASSERT_NE(pre, nullptr);
    ASSERT_NE(plain, nullptr);
    const int kSeqs = 3;
    std::vector<std::vector<int32_t>> history(kSeqs);
    std::vector<std::vector<int32_t>> next(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      history[i] = {5 + i, 17, 33 + 2 * i, 9};
      std::vector<int32_t> prompt(history[i].begin(), history[i].end() - 1);
      ASSERT_TRUE(pre->Open({{static_cast<uint64_t>(i + 1), prompt}})[0].ok());
      ASSERT_TRUE(plain->Open({{static_cast<uint64_t>(i + 1), prompt}})[0].ok());
      next[i] = {history[i].back()};
    }
    for (int step = 1; step <= steps; ++step) {
      std::vector<DraftSpec> specs;
      for (int i = 0; i < kSeqs; ++i) {
        DraftSpec s;
        s.id = i + 1;
        s.step = step;
        s.new_tokens = next[i];
        s.shape = *TreeShape::Parse(i == 0 ? "2,2,1" : "3,1,1");
        s.temperature = temperature;
        s.top_k = 8;
        s.seed = 1234 + i;
        specs.push_back(s);
      }
      std::vector<DraftOutcome> a = pre->Draft(specs);
      std::vector<DraftOutcome> b = plain->Draft(specs);
      for (int i = 0; i < kSeqs; ++i) {
        ASSERT_TRUE(a[i].status.ok()) << a[i].status;
        ASSERT_TRUE(b[i].status.ok()) << b[i].status;
        EXPECT_FALSE(b[i].is_predraft_hit);
        const TokenTree& t = a[i].tree;
        EXPECT_EQ(t.tokens, b[i].tree.tokens) << "seq " << i << " step " << step;
        EXPECT_EQ(t.parents, b[i].tree.parents) << "seq " << i << " step " << step;
        ASSERT_EQ(t.draft.size(), b[i].tree.draft.size());
        for (size_t v = 0; v < t.draft.size(); ++v) {
          EXPECT_EQ(t.draft[v].tokens, b[i].tree.draft[v].tokens) << "node " << v;
          EXPECT_EQ(t.draft[v].probs, b[i].tree.draft[v].probs) << "node " << v;
        }
        // The outcome this sequence reports for the step.
        std::vector<int32_t> accepted;
        if ((i + step) % 2 == 1) {
          int32_t v = 0;
          for (std::vector<int32_t> ch = t.Children(v); !ch.empty(); ch = t.Children(v)) {
            v = ch[0];
            accepted.push_back(t.tokens[v]);
          }
          std::vector<int32_t> h = history[i];
          h.insert(h.end(), accepted.begin(), accepted.end());
          accepted.push_back(Argmax(h));
        } else {
          int32_t bonus = 3;
          while (t.ChildWithToken(0, bonus) >= 0) ++bonus;
          accepted.push_back(bonus);
        }
        history[i].insert(history[i].end(), accepted.begin(), accepted.end());
        next[i] = accepted;
      }
      pre->WaitIdle();
    }
    *stats = pre->Stats();
    std::printf("hits %lld misses %lld unprepared %lld\n", static_cast<long long>(stats->predraft_hits),
                static_cast<long long>(stats->predraft_misses),
                static_cast<long long>(stats->predraft_unprepared));
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LocalModel> local_;
};

TEST_P(PredraftTest, GreedyHitsEqualPlainDrafts) {
  DrafterStats s;
  RunBoth(0.0f, 8, &s);
  EXPECT_GT(s.predraft_hits, 0);
  EXPECT_GT(s.predraft_misses, 0);
  EXPECT_EQ(s.predraft_hits + s.predraft_misses + s.predraft_unprepared, 3 * 8);  // step 1 is unprepared
}

TEST_P(PredraftTest, SampledHitsEqualPlainDrafts) {
  DrafterStats s;
  RunBoth(0.8f, 8, &s);
  EXPECT_GT(s.predraft_hits, 0);
  EXPECT_EQ(s.predraft_hits + s.predraft_misses + s.predraft_unprepared, 3 * 8);  // step 1 is unprepared
}

TEST_P(PredraftTest, SampledDraftsAreNotPreDraftedUnlessAsked) {
  std::unique_ptr<Drafter> d = Make(4, /*sampled=*/false);
  const DrafterStats before = d->Stats();
  ASSERT_TRUE(d->Open({{1, {4, 5, 6}}})[0].ok());
  DraftSpec s;
  s.id = 1;
  s.step = 1;
  s.new_tokens = {7};
  s.shape = *TreeShape::Parse("2,2");
  s.temperature = 1.0f;
  s.seed = 3;
  ASSERT_TRUE(d->Draft({s})[0].status.ok());
  d->WaitIdle();
  s.step = 2;
  s.new_tokens = {9};
  ASSERT_TRUE(d->Draft({s})[0].status.ok());
  EXPECT_EQ(d->Stats().predraft_unprepared, 2);
  EXPECT_EQ(d->Stats().predraft_hits + d->Stats().predraft_misses, 0);
}

TEST_P(PredraftTest, CallsLargerThanMaxBatchArePreDraftedNot) {
  std::unique_ptr<Drafter> d = Make(2, /*sampled=*/true, /*max_batch=*/1);
  ASSERT_TRUE(d->Open({{1, {4, 5, 6}}, {2, {4, 5, 7}}})[0].ok());
  auto spec = [](uint64_t id, uint64_t step, int32_t token) {
    DraftSpec s;
    s.id = id;
    s.step = step;
    s.new_tokens = {token};
    s.shape = *TreeShape::Parse("2,1");
    return s;
  };
  // A call of two sequences prepares nothing: the next call finds nothing ...
  for (const DraftOutcome& o : d->Draft({spec(1, 1, 7), spec(2, 1, 8)})) {
    ASSERT_TRUE(o.status.ok()) << o.status;
  }
  d->WaitIdle();
  ASSERT_TRUE(d->Draft({spec(1, 2, 9)})[0].status.ok());
  EXPECT_EQ(d->Stats().predraft_unprepared, 3);
  // ... a call of one does: the next call hits or misses a prepared tree.
  d->WaitIdle();
  ASSERT_TRUE(d->Draft({spec(1, 3, 10)})[0].status.ok());
  EXPECT_EQ(d->Stats().predraft_unprepared, 3);
  EXPECT_EQ(d->Stats().predraft_hits + d->Stats().predraft_misses, 1);
}

TEST_P(PredraftTest, ReleaseFreesPreparedForks) {
  std::unique_ptr<Drafter> d = Make(4);
  const DrafterStats before = d->Stats();
  ASSERT_TRUE(d->Open({{1, {4, 5, 6}}})[0].ok());
  DraftSpec s;
  s.id = 1;
  s.step = 1;
  s.new_tokens = {7};
  s.shape = *TreeShape::Parse("2,2");
  ASSERT_TRUE(d->Draft({s})[0].status.ok());
  d->WaitIdle();
  EXPECT_LT(d->Stats().slots_free, before.slots_free);
  EXPECT_EQ(d->Release({1}), 1);
  EXPECT_EQ(d->Stats().slots_free, before.slots_free);
}

INSTANTIATE_TEST_SUITE_P(Kinds, PredraftTest,
                         ::testing::Values(Kind{"mamba", "tiny_mamba"},
                                           Kind{"transformer", "tiny_llama_gqa"}),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param.kind;
                         });

TEST(PredictOutcomesTest, GreedyChainLeafAndTopBonusComeFirst) {
  // Root -> a (p .9) -> b (p .9); each node's logits put its child first.
  TokenTree t = TokenTree::Root(0);
  const int32_t a = t.AddNode(0, 1);
  t.AddNode(a, 2);
  std::vector<std::vector<float>> logits(3, std::vector<float>(4, 0.0f));
  logits[0] = {0.0f, 5.0f, 0.0f, 1.0f};
  logits[1] = {0.0f, 0.0f, 5.0f, 1.0f};
  logits[2] = {0.0f, 0.0f, 0.0f, 5.0f};
  std::vector<PredictedOutcome> o = PredictOutcomes(t, logits, 0.0f, 3);
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].path, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(o[0].bonus, 3);
  for (size_t k = 1; k < o.size(); ++k) EXPECT_LE(o[k].prob, o[k - 1].prob);
  for (const PredictedOutcome& x : o) {
    EXPECT_LT(t.ChildWithToken(x.path.back(), x.bonus), 0) << "bonus " << x.bonus;
  }
}

}  // namespace
}  // namespace treespec
