// Drafters without gRPC (kind mamba on tiny_mamba, kind transformer on
// tiny_llama_gqa: one ModelDrafter over SequenceModel), checked against the
// drafter model run directly (LocalModel):
//  - a shape (N1..Nγ) gives B_i = N1·…·Ni nodes at level i, N_i children
//    under every node above the last level;
//  - greedy trees hold each node's top-N tokens by the drafter's own logits;
//  - sampled trees carry q = top-k of softmax(logits / T) at every expanded
//    node, with distinct children inside q's support;
//  - advancing along an accepted path (node states reused) leaves the drafter
//    exactly where a fresh drafter fed the whole history would be;
//  - repeated / out-of-order steps are ABORTED and change nothing; other
//    per-sequence failures stay with their sequence; batching changes nothing;
//  - a --kind that does not match the model is INVALID_ARGUMENT;
//  - leases: idle sequences are released, Draft renews the lease.
#include "drafter_service/drafter.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/spec/sampling.h"
#include "core/tensor/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kV = 128;

struct Kind {
  std::string kind;
  std::string model;
};
void PrintTo(const Kind& k, std::ostream* os) { *os << k.kind; }

std::string ModelDir(const std::string& name) {
  return testing::SourceDir() + "/tests/fixtures/models/" + name;
}

std::vector<int32_t> Prompt(int i, int n = 6) {
  std::vector<int32_t> p;
  for (int k = 0; k < n; ++k) p.push_back((i * 29 + k * 13 + 7) % 125 + 3);
  return p;
}

TreeShape Shape(const std::string& s) { return *TreeShape::Parse(s); }

DraftSpec Spec(uint64_t id, uint64_t step, std::vector<int32_t> new_tokens,
               const std::string& shape, float temperature = 0.0f, int32_t top_k = 0,
               uint64_t seed = 0) {
  DraftSpec d;
  d.id = id;
  d.step = step;
  d.new_tokens = std::move(new_tokens);
  d.shape = Shape(shape);
  d.temperature = temperature;
  d.top_k = top_k;
  d.seed = seed;
  return d;
}

class DrafterTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    auto local = LocalModel::Load(ModelDir(GetParam().model), "cpu", 1, 512);
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = std::move(*local);
  }

  std::unique_ptr<Drafter> Make(int64_t max_sequences = 8, int64_t prefill_chunk_tokens = 32) {
    DrafterOptions o;
    o.kind = GetParam().kind;
    o.model_dir = ModelDir(GetParam().model);
    o.max_sequences = max_sequences;
    o.prefill_chunk_tokens = prefill_chunk_tokens;
    o.max_tree_nodes = 64;
    o.max_context = 256;
    auto d = CreateDrafter(o, backend_.get());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }

  // The drafter model's next-token logits after `history`.
  std::vector<float> RefLogits(const std::vector<int32_t>& history) {
    std::vector<float> all;
    EXPECT_TRUE(local_->AllLogits(history, &all).ok());
    return std::vector<float>(all.end() - kV, all.end());
  }

  static void Open(Drafter* d, uint64_t id, const std::vector<int32_t>& prompt) {
    std::vector<absl::Status> st = d->Open({{id, prompt}});
    ASSERT_EQ(st.size(), 1u);
    ASSERT_TRUE(st[0].ok()) << st[0];
  }
  static TokenTree DraftOne(Drafter* d, const DraftSpec& spec) {
    std::vector<DraftOutcome> out = d->Draft({spec});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].status.ok()) << out[0].status;
    EXPECT_EQ(out[0].id, spec.id);
    EXPECT_EQ(out[0].step, spec.step);
    return out[0].tree;
  }

  // The tree a fresh drafter drafts after `history` (the last token is the root).
  TokenTree FreshTree(const std::vector<int32_t>& history, const std::string& shape) {
    std::unique_ptr<Drafter> fresh = Make();
    Open(fresh.get(), 1, std::vector<int32_t>(history.begin(), history.end() - 1));
    return DraftOne(fresh.get(), Spec(1, 1, {history.back()}, shape));
  }

  // Tokens from the root to `node`, root included.
  static std::vector<int32_t> PathTokens(const TokenTree& t, int32_t node) {
    std::vector<int32_t> out;
    for (int32_t v : t.PathTo(node)) out.push_back(t.tokens[v]);
    return out;
  }

  // Every expanded node's children are its top-N tokens by the reference
  // logits after history + path (ties within 1e-4 may come in either order).
  void ExpectGreedyChildren(const TokenTree& t, const std::vector<int32_t>& history_before_root) {
    const auto children = t.ChildLists();
    for (int32_t v = 0; v < t.num_nodes(); ++v) {
      if (children[v].empty()) continue;
      std::vector<int32_t> h = history_before_root;
      for (int32_t tok : PathTokens(t, v)) h.push_back(tok);
      const std::vector<float> logits = RefLogits(h);
      std::vector<int32_t> order(kV);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      for (size_t j = 0; j < children[v].size(); ++j) {
        const int32_t got = t.tokens[children[v][j]];
        if (got == order[j]) continue;
        EXPECT_NEAR(logits[got], logits[order[j]], 1e-4)
            << "node " << v << " child " << j << ": drafted " << got << ", top token " << order[j];
      }
    }
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LocalModel> local_;
};

TEST_P(DrafterTest, ShapesGiveTheRightNodeCountsPerLevel) {
  std::unique_ptr<Drafter> d = Make();
  uint64_t id = 1;
  for (const std::string shape_text :
       {"chain:4", "3,2,2,1,1", "3,3,2,1", "2,2,2,2", "4,2,1", "1", "8,3"}) {
    const TreeShape shape = Shape(shape_text);
    Open(d.get(), id, Prompt(static_cast<int>(id)));
    TokenTree t = DraftOne(d.get(), Spec(id, 1, {42}, shape_text));
    ASSERT_TRUE(t.Validate(kV).ok()) << shape_text << ": " << t.Validate(kV);
    EXPECT_EQ(t.tokens[0], 42);
    EXPECT_EQ(t.num_nodes(), shape.NumNodes()) << shape_text;
    EXPECT_TRUE(t.draft.empty()) << "greedy trees carry no q";
    const std::vector<int32_t> depth = t.Depths();
    const auto children = t.ChildLists();
    std::vector<int64_t> per_level(shape.Depth() + 1, 0);
    for (int32_t v = 0; v < t.num_nodes(); ++v) {
      per_level[depth[v]] += 1;
      const size_t want = depth[v] < shape.Depth() ? shape.fanouts()[depth[v]] : 0;
      EXPECT_EQ(children[v].size(), want) << shape_text << " node " << v;
    }
    for (int level = 1; level <= shape.Depth(); ++level) {
      EXPECT_EQ(per_level[level], shape.LevelSizes()[level - 1])
          << shape_text << " level " << level;
    }
    ++id;
  }
  EXPECT_EQ(d->Stats().num_sequences, 7);
}

TEST_P(DrafterTest, GreedyTreesHoldTheDrafterTopTokens) {
  std::unique_ptr<Drafter> d = Make();
  const std::vector<int32_t> prompt = Prompt(3);
  Open(d.get(), 1, prompt);
  TokenTree t = DraftOne(d.get(), Spec(1, 1, {17}, "4,2,2"));
  ExpectGreedyChildren(t, prompt);
}

// Prompts are fed in chunks (here of 7 tokens, split between the two
// sequences of the call): the drafted trees are those of the whole prompt.
TEST_P(DrafterTest, ChunkedOpenDraftsFromTheWholePrompt) {
  std::unique_ptr<Drafter> d = Make(8, /*prefill_chunk_tokens=*/7);
  const std::vector<int32_t> long_prompt = Prompt(11, 90), short_prompt = Prompt(12, 5);
  std::vector<absl::Status> st = d->Open({{1, long_prompt}, {2, short_prompt}});
  ASSERT_TRUE(st[0].ok()) << st[0];
  ASSERT_TRUE(st[1].ok()) << st[1];
  ExpectGreedyChildren(DraftOne(d.get(), Spec(1, 1, {17}, "3,2")), long_prompt);
  ExpectGreedyChildren(DraftOne(d.get(), Spec(2, 1, {19}, "3,2")), short_prompt);
}

TEST_P(DrafterTest, SampledTreesCarryQAtEveryExpandedNode) {
  std::unique_ptr<Drafter> d = Make();
  const std::vector<int32_t> prompt = Prompt(4);
  Open(d.get(), 1, prompt);
  const float temperature = 0.9f;
  const int32_t top_k = 10;
  TokenTree t = DraftOne(d.get(), Spec(1, 1, {23}, "3,3,2,1", temperature, top_k, 99));
  ASSERT_TRUE(t.Validate(kV).ok()) << t.Validate(kV);
  ASSERT_EQ(t.draft.size(), static_cast<size_t>(t.num_nodes()));
  const auto children = t.ChildLists();
  for (int32_t v = 0; v < t.num_nodes(); ++v) {
    const SparseDist& q = t.draft[v];
    if (children[v].empty()) {
      EXPECT_TRUE(q.tokens.empty()) << "leaf " << v << " carries a q";
      continue;
    }
    ASSERT_EQ(q.tokens.size(), static_cast<size_t>(top_k)) << "node " << v;
    ASSERT_EQ(q.probs.size(), q.tokens.size());
    double sum = 0;
    for (size_t j = 0; j < q.probs.size(); ++j) {
      sum += q.probs[j];
      if (j > 0) {
        EXPECT_LE(q.probs[j], q.probs[j - 1]) << "node " << v << " q is not descending";
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-4) << "node " << v;
    std::set<int32_t> seen;
    for (int32_t c : children[v]) {
      EXPECT_TRUE(seen.insert(t.tokens[c]).second)
          << "node " << v << " repeats child " << t.tokens[c];
      EXPECT_GT(q.ProbOf(t.tokens[c]), 0.0f) << "node " << v << " child outside q";
    }
    // q is the drafter's own top-k distribution at this node.
    std::vector<int32_t> h = prompt;
    for (int32_t tok : PathTokens(t, v)) h.push_back(tok);
    const std::vector<float> logits = RefLogits(h);
    const SparseDist ref = TopKDist(logits.data(), kV, top_k, temperature);
    for (size_t j = 0; j < ref.tokens.size(); ++j) {
      EXPECT_NEAR(q.ProbOf(ref.tokens[j]), ref.probs[j], 1e-4)
          << "node " << v << " token " << ref.tokens[j];
    }
  }
  // The same seed and step give the same tree (counter-based randomness).
  std::unique_ptr<Drafter> d2 = Make();
  Open(d2.get(), 5, prompt);
  TokenTree t2 = DraftOne(d2.get(), Spec(5, 1, {23}, "3,3,2,1", temperature, top_k, 99));
  EXPECT_EQ(t2.tokens, t.tokens);
  EXPECT_EQ(t2.parents, t.parents);
  // Another seed gives another tree.
  std::unique_ptr<Drafter> d3 = Make();
  Open(d3.get(), 5, prompt);
  TokenTree t3 = DraftOne(d3.get(), Spec(5, 1, {23}, "3,3,2,1", temperature, top_k, 100));
  EXPECT_NE(t3.tokens, t.tokens);
}

// top_k 0 asks for the drafter's default support (DrafterOptions::default_top_k),
// not for q = the children alone.
TEST_P(DrafterTest, SampledTreeWithoutTopKUsesTheDefaultSupport) {
  std::unique_ptr<Drafter> d = Make();
  Open(d.get(), 1, Prompt(5));
  TokenTree t = DraftOne(d.get(), Spec(1, 1, {23}, "3,2", 1.0f, 0, 7));
  ASSERT_EQ(t.draft.size(), static_cast<size_t>(t.num_nodes()));
  const size_t support = static_cast<size_t>(DrafterOptions().default_top_k);
  EXPECT_EQ(t.draft[0].tokens.size(), support);
  // A level wider than the default keeps all its children inside q.
  Open(d.get(), 2, Prompt(5));
  TokenTree wide = DraftOne(d.get(), Spec(2, 1, {23}, "40", 1.0f, 0, 7));
  EXPECT_EQ(wide.draft[0].tokens.size(), 40u);
  EXPECT_TRUE(wide.Validate(kV).ok()) << wide.Validate(kV);
}

TEST_P(DrafterTest, AdvancingAlongAcceptedPathsEqualsAFreshDrafter) {
  std::unique_ptr<Drafter> d = Make();
  const std::string shape = "3,2,2,1";
  std::vector<int32_t> history = Prompt(6);
  Open(d.get(), 1, history);
  history.push_back(31);
  TokenTree t = DraftOne(d.get(), Spec(1, 1, {31}, shape));
  EXPECT_EQ(t.tokens, FreshTree(history, shape).tokens);

  // A token that is not a child of `node`.
  auto not_child = [](const TokenTree& tree, int32_t node) {
    for (int32_t tok = 3;; ++tok) {
      if (tree.ChildWithToken(node, tok) < 0) return tok;
    }
  };
  // The deepest node reached by first children from `node`.
  auto first_path = [](const TokenTree& tree, int32_t node, int depth) {
    std::vector<int32_t> path;
    for (int i = 0; i < depth; ++i) {
      std::vector<int32_t> c = tree.Children(node);
      if (c.empty()) break;
      node = c[0];
      path.push_back(node);
    }
    return path;
  };

  for (int step = 2; step <= 7; ++step) {
    std::vector<int32_t> new_tokens;
    switch (step) {
      case 2: {  // the whole depth accepted, then a bonus
        std::vector<int32_t> p = first_path(t, 0, 4);
        for (int32_t v : p) new_tokens.push_back(t.tokens[v]);
        new_tokens.push_back(not_child(t, p.back()));
        break;
      }
      case 3:  // nothing accepted
        new_tokens = {not_child(t, 0)};
        break;
      case 4: {  // through the root's second child, then its first child
        const int32_t c2 = t.Children(0)[1];
        const int32_t c21 = t.Children(c2)[0];
        new_tokens = {t.tokens[c2], t.tokens[c21], not_child(t, c21)};
        break;
      }
      case 5: {  // leaves the tree after one token; several tokens to feed
        const int32_t c1 = t.Children(0)[0];
        new_tokens = {t.tokens[c1], not_child(t, c1), 9, 10};
        break;
      }
      case 6: {  // the bonus happens to be a drafted child (deeper accept is the caller's)
        const int32_t c3 = t.Children(0)[2];
        new_tokens = {t.tokens[c3]};
        break;
      }
      default: {  // two levels accepted through last children
        const int32_t c = t.Children(0).back();
        const int32_t cc = t.Children(c).back();
        new_tokens = {t.tokens[c], t.tokens[cc], 5};
        break;
      }
    }
    history.insert(history.end(), new_tokens.begin(), new_tokens.end());
    t = DraftOne(d.get(), Spec(1, static_cast<uint64_t>(step), new_tokens, shape));
    const TokenTree fresh = FreshTree(history, shape);
    EXPECT_EQ(t.tokens, fresh.tokens) << "step " << step;
    EXPECT_EQ(t.parents, fresh.parents) << "step " << step;
    ExpectGreedyChildren(t, std::vector<int32_t>(history.begin(), history.end() - 1));
  }
}

// A catch-up (DraftSpec::catch_up) answers the root alone and leaves the
// drafter where a draft fed the same tokens would: the next draft equals a
// fresh drafter's after the whole history, whether the catch-up follows a
// drafted tree (nothing of it accepted) or another catch-up.
TEST_P(DrafterTest, CatchUpConsumesTokensAndDraftsNothing) {
  std::unique_ptr<Drafter> d = Make();
  const std::string shape = "2,2";
  std::vector<int32_t> history = Prompt(5);
  Open(d.get(), 1, history);
  history.push_back(31);
  TokenTree t = DraftOne(d.get(), Spec(1, 1, {31}, shape));
  uint64_t step = 2;
  for (const std::vector<int32_t>& backlog :
       {std::vector<int32_t>{7, 8, 9, 10, 11, 12, 13, 14}, std::vector<int32_t>{15, 16, 17}}) {
    DraftSpec catch_up = Spec(1, step++, backlog, shape);
    catch_up.catch_up = true;
    TokenTree root = DraftOne(d.get(), catch_up);
    EXPECT_EQ(root.tokens, std::vector<int32_t>{backlog.back()});
    EXPECT_EQ(root.parents, std::vector<int32_t>{-1});
    history.insert(history.end(), backlog.begin(), backlog.end());
  }
  history.push_back(18);
  t = DraftOne(d.get(), Spec(1, step, {18}, shape));
  const TokenTree fresh = FreshTree(history, shape);
  EXPECT_EQ(t.tokens, fresh.tokens);
  EXPECT_EQ(t.parents, fresh.parents);
}

TEST_P(DrafterTest, RepeatedAndOutOfOrderStepsAreAbortedAndChangeNothing) {
  std::unique_ptr<Drafter> d = Make();
  std::vector<int32_t> history = Prompt(7);
  Open(d.get(), 1, history);
  history.push_back(12);
  TokenTree t1 = DraftOne(d.get(), Spec(1, 1, {12}, "2,2"));
  for (uint64_t bad_step : {1u, 0u, 3u, 10u}) {
    std::vector<DraftOutcome> out = d->Draft({Spec(1, bad_step, {t1.tokens[1], 50}, "2,2")});
    EXPECT_EQ(out[0].status.code(), absl::StatusCode::kAborted) << "step " << bad_step;
    EXPECT_THAT(out[0].status.message(),
                HasSubstr(bad_step < 2 ? "already drafted" : "out of order"));
    EXPECT_EQ(out[0].tree.num_nodes(), 0);
  }
  // The state is as if the bad calls never happened.
  history.insert(history.end(), {t1.tokens[1], 50});
  TokenTree t2 = DraftOne(d.get(), Spec(1, 2, {t1.tokens[1], 50}, "2,2"));
  EXPECT_EQ(t2.tokens, FreshTree(history, "2,2").tokens);
}

TEST_P(DrafterTest, FailuresInOneBatchStayWithTheirSequence) {
  std::unique_ptr<Drafter> d = Make();
  for (uint64_t id = 1; id <= 6; ++id) Open(d.get(), id, Prompt(static_cast<int>(id)));
  std::vector<DraftSpec> batch = {
      Spec(1, 1, {5}, "3,2"),          // 0 good
      Spec(2, 1, {}, "3,2"),           // 1 no new tokens
      Spec(3, 1, {5, 128}, "3,2"),     // 2 token outside the vocabulary
      Spec(4, 1, {5}, "8,8"),          // 3 73 nodes > 64
      Spec(5, 1, {5}, "2", -1.0f),     // 4 negative temperature
      Spec(6, 1, {5}, "2", 1.0f, -3),  // 5 negative top_k
      Spec(77, 1, {5}, "2"),           // 6 unknown sequence
      Spec(1, 1, {5}, "3,2"),          // 7 sequence 1 twice
  };
  std::vector<DraftOutcome> out = d->Draft(batch);
  ASSERT_EQ(out.size(), batch.size());
  EXPECT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_EQ(out[0].tree.num_nodes(), 1 + 3 + 6);
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[1].status.message(), HasSubstr("new_tokens"));
  EXPECT_EQ(out[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[2].status.message(), HasSubstr("new_tokens[1] = 128"));
  EXPECT_EQ(out[3].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[3].status.message(), HasSubstr("73 nodes"));
  EXPECT_EQ(out[4].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[4].status.message(), HasSubstr("temperature"));
  EXPECT_EQ(out[5].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[5].status.message(), HasSubstr("top_k"));
  EXPECT_EQ(out[6].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(out[7].status.code(), absl::StatusCode::kInvalidArgument);
  // The failed sequences' step 1 was not consumed.
  for (uint64_t id = 2; id <= 6; ++id) {
    std::vector<int32_t> h = Prompt(static_cast<int>(id));
    h.push_back(5);
    TokenTree t = DraftOne(d.get(), Spec(id, 1, {5}, "2,2"));
    EXPECT_EQ(t.tokens, FreshTree(h, "2,2").tokens) << "sequence " << id;
  }
}

TEST_P(DrafterTest, BatchedDraftingEqualsDraftingAlone) {
  const std::vector<std::string> shapes = {"3,2,2,1,1", "chain:4", "2,2,2,2", "4,2,1"};
  std::unique_ptr<Drafter> batched = Make();
  std::vector<std::unique_ptr<Drafter>> alone;
  std::vector<std::vector<int32_t>> roots = {{3}, {4}, {5}, {6}};
  for (int i = 0; i < 4; ++i) {
    Open(batched.get(), i + 1, Prompt(10 + i, 3 + i));
    alone.push_back(Make());
    Open(alone.back().get(), 1, Prompt(10 + i, 3 + i));
  }
  for (uint64_t step = 1; step <= 3; ++step) {
    std::vector<DraftSpec> specs;
    for (int i = 0; i < 4; ++i) specs.push_back(Spec(i + 1, step, roots[i], shapes[i]));
    std::vector<DraftOutcome> out = batched->Draft(specs);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(out[i].status.ok()) << out[i].status;
      TokenTree single = DraftOne(alone[i].get(), Spec(1, step, roots[i], shapes[i]));
      EXPECT_EQ(out[i].tree.tokens, single.tokens) << "sequence " << i << " step " << step;
      // Accept the first child, then a bonus.
      const TokenTree& t = out[i].tree;
      roots[i] = {t.tokens[t.Children(0)[0]], static_cast<int32_t>(20 + step)};
    }
  }
}

TEST_P(DrafterTest, OpenAndReleaseManageSequences) {
  std::unique_ptr<Drafter> d = Make(/*max_sequences=*/2);
  const DrafterStats empty = d->Stats();
  EXPECT_EQ(empty.num_sequences, 0);
  std::vector<absl::Status> st = d->Open(
      {{1, Prompt(1)}, {1, Prompt(1)}, {2, {4, 200}}, {3, Prompt(3)}, {4, Prompt(4)}, {5, {}}});
  ASSERT_EQ(st.size(), 6u);
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_EQ(st[1].code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(st[2].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st[2].message(), HasSubstr("prompt[1] = 200"));
  EXPECT_TRUE(st[3].ok()) << st[3];
  EXPECT_EQ(st[4].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st[5].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(d->Stats().num_sequences, 2);
  EXPECT_LT(d->Stats().slots_free, empty.slots_free);
  DraftOne(d.get(), Spec(1, 1, {9}, "2,2"));
  EXPECT_EQ(d->Release({1, 99, 3}), 2);
  EXPECT_EQ(d->Stats().num_sequences, 0);
  EXPECT_EQ(d->Stats().slots_free, empty.slots_free);
  // Released ids are unknown afterwards, and can be opened again.
  EXPECT_EQ(d->Draft({Spec(1, 2, {9}, "2")})[0].status.code(), absl::StatusCode::kNotFound);
  Open(d.get(), 1, {});
  DraftOne(d.get(), Spec(1, 1, {9}, "2"));
}

TEST_P(DrafterTest, LeasesReleaseIdleSequences) {
  DrafterOptions o;
  o.kind = GetParam().kind;
  o.model_dir = ModelDir(GetParam().model);
  o.max_sequences = 4;
  o.max_context = 256;
  o.sequence_lease = absl::Milliseconds(600);
  auto d = CreateDrafter(o, backend_.get());
  ASSERT_TRUE(d.ok()) << d.status();
  const DrafterStats empty = (*d)->Stats();
  Open(d->get(), 1, Prompt(1));
  Open(d->get(), 2, Prompt(2));
  EXPECT_EQ((*d)->ReleaseExpired(), 0);
  // Sequence 1 keeps drafting (each Draft renews its lease); 2 stays idle.
  int released = 0;
  for (uint64_t step = 1; step <= 9; ++step) {
    absl::SleepFor(absl::Milliseconds(100));
    DraftOne(d->get(), Spec(1, step, {9}, "2"));
    released += (*d)->ReleaseExpired();
  }
  EXPECT_EQ(released, 1) << "sequence 2 idle for ~900 ms";
  EXPECT_EQ((*d)->Draft({Spec(2, 1, {9}, "2")})[0].status.code(), absl::StatusCode::kNotFound);
  absl::SleepFor(absl::Milliseconds(700));
  EXPECT_EQ((*d)->ReleaseExpired(), 1);
  EXPECT_EQ((*d)->Stats().num_sequences, 0);
  EXPECT_EQ((*d)->Stats().slots_free, empty.slots_free);
}

TEST(DrafterKindTest, KindThatDoesNotMatchTheModelIsInvalidArgument) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  for (const Kind& k : {Kind{"transformer", "tiny_mamba"}, Kind{"mamba", "tiny_llama_gqa"}}) {
    DrafterOptions o;
    o.kind = k.kind;
    o.model_dir = ModelDir(k.model);
    auto d = CreateDrafter(o, backend.get());
    ASSERT_FALSE(d.ok()) << k.kind;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr("--kind " + k.kind + " does not match"));
  }
  DrafterOptions o;
  o.kind = "medusa";  // not a drafter kind
  o.model_dir = ModelDir("tiny_mamba");
  auto d = CreateDrafter(o, backend.get());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("'medusa'"));
  // A ReDrafter head needs its target too.
  o.kind = "redrafter";
  d = CreateDrafter(o, backend.get());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("--target"));
  // EAGLE heads need their target, and a head directory.
  o.kind = "eagle";
  d = CreateDrafter(o, backend.get());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("--target"));
  o.target_dir = ModelDir("tiny_llama_gqa");
  d = CreateDrafter(o, backend.get());
  EXPECT_FALSE(d.ok()) << "a Mamba model is not an EAGLE head";
  EXPECT_THAT(d.status().message(), HasSubstr("eagle_kind"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, DrafterTest,
                         ::testing::Values(Kind{"mamba", "tiny_mamba"},
                                           Kind{"transformer", "tiny_llama_gqa"}),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param.kind;
                         });

}  // namespace
}  // namespace treespec
