// The STree tree scan and activation replay (paper 001 §3, Alg. 1) through
// HybridSequenceModel, on tiny_mamba2 (pure Mamba-2, n_groups 2) and
// tiny_bamba (Mamba-2 + attention, partial rotary), also with f16 / bf16
// weights kept as stored, all bit for bit on the CPU against decoding one
// token at a time:
//  - every node of a packed tree after a committed prefix has the logits of
//    decoding its root path token by token; a prompt fed as one chain equals
//    it fed token by token;
//  - after CommitPath (activation replay), continuing equals a sequence fed
//    only the accepted path (logits, and the state itself for Mamba-2);
//    Commit of part of a chain likewise;
//  - several sequences in one batch (trees, chains, a tree grown over several
//    calls with num_prior > 0) each equal their own decoding;
//  - ForkPath equals CommitPath; chains longer than the cached tail commit
//    whole; running out of sequences or KV blocks is RESOURCE_EXHAUSTED and
//    leaves the others intact;
//  - hidden states of chosen layers and argmax_only work as for Llama.
#include <memory>
#include <string>
#include <vector>

#include "core/model/hybrid_sequence_model.h"
#include "core/model/sequence_model.h"
#include "core/spec/sampling.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 5, 127, 64, 3, 88, 9, 14};
// 0: 12 -> {1: 30, 2: 31}; 1 -> {3: 40, 4: 44}; 2 -> 5: 41; 3 -> 6: 50; 6 -> 7: 51.
const std::vector<int32_t> kTree = {12, 30, 31, 40, 44, 41, 50, 51};
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 1, 2, 3, 6};

std::vector<int32_t> PathTo(int32_t node) {
  std::vector<int32_t> path;
  for (int32_t v = node; v >= 0; v = kParents[v]) path.insert(path.begin(), v);
  return path;
}

class HybridTreeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Load(/*max_sequences=*/6, /*kv_blocks=*/96); }
  std::unique_ptr<SequenceModel> Load(int64_t max_sequences, int64_t kv_blocks) {
    SequenceModelOptions o;
    o.kv_blocks = kv_blocks;
    o.kv_block_size = 8;
    o.max_sequences = max_sequences;
    o.max_tail_nodes = 12;
    auto m = LoadSequenceModel(testing::SourceDir() + "/tests/fixtures/models/" + GetParam(),
                               backend_.get(), nullptr, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  int64_t Open() {
    absl::StatusOr<int64_t> h = model_->Open(96);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : -1;
  }
  // Feeds `tokens` one at a time (chain of one, Commit) and returns the
  // logits after the last.
  std::vector<float> Decode(int64_t h, const std::vector<int32_t>& tokens) {
    ForwardOutput fo;
    for (int32_t t : tokens) {
      absl::Status st = model_->Forward({{h, {t}, {}, LogitsMode::kLast}}, &fo);
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_TRUE(model_->Commit(h, 1).ok());
    }
    return fo.logits;
  }
  // Logits after `history`, decoded token by token in a fresh sequence.
  std::vector<float> Reference(const std::vector<int32_t>& history) {
    const int64_t h = Open();
    std::vector<float> logits = Decode(h, history);
    model_->Release(h);
    return logits;
  }
  int64_t OpenWith(const std::vector<int32_t>& prefix) {
    const int64_t h = Open();
    ForwardOutput fo;
    EXPECT_TRUE(model_->Forward({{h, prefix, {}, LogitsMode::kNone}}, &fo).ok());
    EXPECT_TRUE(model_->Commit(h, static_cast<int64_t>(prefix.size())).ok());
    return h;
  }
  std::vector<int32_t> History(int32_t node, std::vector<int32_t> prefix = kPrompt) {
    for (int32_t v : PathTo(node)) prefix.push_back(kTree[v]);
    return prefix;
  }
  static void ExpectSame(const float* got, const std::vector<float>& want, const std::string& what) {
    ASSERT_FALSE(want.empty()) << what;
    for (size_t t = 0; t < want.size(); ++t) ASSERT_EQ(got[t], want[t]) << what << " token " << t;
  }

  // f16 / bf16 fixtures keep their weights in that type.
  std::unique_ptr<Backend> backend_ = CreateCpuBackend(
      1, GetParam().ends_with("16") ? CpuWeights::kAuto : CpuWeights::kF32);
  std::unique_ptr<SequenceModel> model_;
};

TEST_P(HybridTreeTest, ChainEqualsTokenByTokenAndTreeNodesEqualTheirPaths) {
  const std::vector<float> stepped = Reference(kPrompt);
  const int64_t h = Open();
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kPrompt, {}, LogitsMode::kLast}}, &fo).ok());
  ExpectSame(fo.logits.data(), stepped, "prompt as one chain");
  ASSERT_TRUE(model_->Commit(h, static_cast<int64_t>(kPrompt.size())).ok());
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &fo).ok());
  ASSERT_EQ(fo.row_start, (std::vector<int32_t>{0, 8}));
  for (int32_t node = 0; node < 8; ++node) {
    ExpectSame(fo.row_logits(node), Reference(History(node)), "node " + std::to_string(node));
  }
}

TEST_P(HybridTreeTest, ContinuingAfterCommitPathEqualsFeedingOnlyThePath) {
  for (int32_t last : {0, 4, 5, 7}) {
    const int64_t h = OpenWith(kPrompt);
    ForwardOutput fo;
    ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &fo).ok());
    ASSERT_TRUE(model_->CommitPath(h, PathTo(last)).ok());
    std::vector<int32_t> history = History(last);
    EXPECT_EQ(model_->length(h), static_cast<int64_t>(history.size()));
    const int64_t ref = Open();
    Decode(ref, history);
    if (model_->info().is_recurrent) {  // the replayed state itself
      auto a = model_->SnapshotState(h);
      auto b = model_->SnapshotState(ref);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->data, b->data) << "state after node " << last;
    }
    // Continue both with a chain, then a tree.
    const std::vector<int32_t> more = {77, 78, 79};
    ForwardOutput got, want;
    ASSERT_TRUE(model_->Forward({{h, more, {}, LogitsMode::kAll}}, &got).ok());
    ASSERT_TRUE(model_->Forward({{ref, more, {}, LogitsMode::kAll}}, &want).ok());
    ExpectSame(got.logits.data(), want.logits, "chain after node " + std::to_string(last));
    ASSERT_TRUE(model_->Commit(h, 3).ok());
    ASSERT_TRUE(model_->Commit(ref, 3).ok());
    ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &got).ok());
    ASSERT_TRUE(model_->Forward({{ref, kTree, kParents, LogitsMode::kAll}}, &want).ok());
    ExpectSame(got.logits.data(), want.logits, "tree after node " + std::to_string(last));
    model_->Release(h);
    model_->Release(ref);
  }
}

TEST_P(HybridTreeTest, PartOfAChainCommitsByReplay) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, {20, 21, 22, 23, 24}, {}, LogitsMode::kNone}}, &fo).ok());
  ASSERT_TRUE(model_->Commit(h, 2).ok());
  std::vector<int32_t> history = kPrompt;
  history.insert(history.end(), {20, 21, 90});
  const std::vector<float> got = Decode(h, {90});
  ExpectSame(got.data(), Reference(history), "after committing 2 of 5");
}

// Two trees, a chain and a tree grown over calls, in the same passes.
TEST_P(HybridTreeTest, SeveralSequencesAndTreesGrownOverCallsInOneBatch) {
  const int64_t a = OpenWith(kPrompt), b = OpenWith({5, 6, 7}), c = OpenWith({9, 8});
  const std::vector<std::pair<int, int>> levels = {{0, 1}, {1, 3}, {3, 6}, {6, 8}};
  for (auto [lo, hi] : levels) {
    std::vector<ForwardSeq> batch = {
        {c, std::vector<int32_t>(kTree.begin() + lo, kTree.begin() + hi),
         std::vector<int32_t>(kParents.begin(), kParents.begin() + hi), LogitsMode::kAll, lo},
        {a, kTree, kParents, LogitsMode::kAll},
        {b, {60, 61}, {}, LogitsMode::kAll}};
    ForwardOutput fo;
    ASSERT_TRUE(model_->Forward(batch, &fo).ok()) << "level " << lo;
    for (int i = lo; i < hi; ++i) {
      ExpectSame(fo.row_logits(i - lo), Reference(History(i, {9, 8})), "grown node " + std::to_string(i));
    }
    const int32_t a0 = fo.row_start[1];
    ExpectSame(fo.row_logits(a0 + 7), Reference(History(7)), "tree node 7");
    ExpectSame(fo.row_logits(fo.row_start[2] + 1), Reference({5, 6, 7, 60, 61}), "chain");
  }
  // Commit a path ending in a node of the first call; b's chain whole.
  ASSERT_TRUE(model_->CommitPath(c, PathTo(4)).ok());
  ASSERT_TRUE(model_->Commit(b, 2).ok());
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{c, {70}, {}, LogitsMode::kLast}, {b, {71}, {}, LogitsMode::kLast}}, &fo).ok());
  std::vector<int32_t> hc = History(4, {9, 8});
  hc.push_back(70);
  ExpectSame(fo.row_logits(0), Reference(hc), "grown tree after CommitPath");
  ExpectSame(fo.row_logits(1), Reference({5, 6, 7, 60, 61, 71}), "chain after Commit");
}

TEST_P(HybridTreeTest, ForkPathEqualsCommitPathBitForBit) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kNone}}, &fo).ok());
  absl::StatusOr<int64_t> fork = model_->ForkPath(h, PathTo(6), 96);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(model_->length(*fork), static_cast<int64_t>(kPrompt.size()) + 4);
  ForwardOutput from_fork, from_commit;
  ASSERT_TRUE(model_->Forward({{*fork, {77}, {}, LogitsMode::kLast}}, &from_fork).ok());
  ASSERT_TRUE(model_->CommitPath(h, PathTo(6)).ok());
  ASSERT_TRUE(model_->Forward({{h, {77}, {}, LogitsMode::kLast}}, &from_commit).ok());
  ExpectSame(from_fork.logits.data(), from_commit.logits, "fork vs commit");
}

TEST_P(HybridTreeTest, LongChainsCommitWholeAndErrorsAreClear) {
  std::vector<int32_t> chain;
  for (int i = 0; i < 20; ++i) chain.push_back(3 + 5 * i % 120);  // > max_tail_nodes (12)
  const int64_t h = Open();
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, chain, {}, LogitsMode::kNone}}, &fo).ok());
  absl::Status st = model_->Commit(h, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  ASSERT_TRUE(model_->Commit(h, 20).ok());
  chain.push_back(33);
  ExpectSame(Decode(h, {33}).data(), Reference(chain), "after a long chain");
  st = model_->Forward({{h, {5, 500}, {}, LogitsMode::kLast}}, &fo);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  st = model_->Forward({{h, {5, 6}, {-1, 1}, LogitsMode::kAll}}, &fo);
  EXPECT_THAT(st.message(), HasSubstr("parent of node 1"));
  st = model_->Forward({{h, {5}, {}, LogitsMode::kAll}, {h, {6}, {}, LogitsMode::kAll}}, &fo);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(model_->CommitPath(h, {1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->Forward({{h + 99, {5}, {}, LogitsMode::kAll}}, &fo).code(),
            absl::StatusCode::kNotFound);
  chain.push_back(34);
  ExpectSame(Decode(h, {34}).data(), Reference(chain), "after the failures");
}

TEST_P(HybridTreeTest, RunningOutIsResourceExhaustedAndTouchesNoOtherSequence) {
  model_ = Load(/*max_sequences=*/2, /*kv_blocks=*/24);
  const int64_t a = OpenWith(kPrompt);
  const int64_t b = Open();
  absl::StatusOr<int64_t> c = model_->Open(96);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
  EXPECT_EQ(model_->ForkPath(a, {}, 96).status().code(), absl::StatusCode::kResourceExhausted);
  model_->Release(b);
  if (model_->info().kind == ModelKind::kHybrid) {  // 24 blocks of 8: a holds 12
    absl::StatusOr<int64_t> big = model_->Open(8 * 13);
    EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  }
  std::vector<int32_t> history = kPrompt;
  history.push_back(12);
  const std::vector<float> got = Decode(a, {12});
  model_->Release(a);
  ExpectSame(got.data(), Reference(history), "the open sequence after the refusals");
  EXPECT_EQ(model_->stats().num_sequences, 0);
}

TEST_P(HybridTreeTest, HiddenStatesAndArgmaxOnly) {
  const int64_t h = OpenWith(kPrompt);
  const int32_t last = static_cast<int32_t>(model_->info().num_layers - 1);
  ForwardOptions opts;
  opts.hidden_layers = {last, 0};
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &fo, opts).ok());
  const int64_t D = model_->info().hidden_size;
  ASSERT_EQ(fo.hidden.size(), static_cast<size_t>(2 * 8 * D));
  ForwardOutput all;
  ForwardSeq every{h, {12, 30}, {}, LogitsMode::kLast};
  every.hidden_all = true;
  ASSERT_TRUE(model_->Forward({every}, &all, opts).ok());
  ASSERT_EQ(all.hidden_row_start, (std::vector<int32_t>{0, 2}));
  // Token 12 is tree node 0 and chain row 0: the same hidden states.
  for (int64_t d = 0; d < D; ++d) ASSERT_EQ(all.hidden[d], fo.hidden[d]) << "layer last, dim " << d;
  for (int64_t d = 0; d < D; ++d) {
    ASSERT_EQ(all.hidden[2 * D + d], fo.hidden[8 * D + d]) << "layer 0, dim " << d;
  }
  opts.hidden_layers = {last + 1};
  EXPECT_EQ(model_->Forward({{h, {12}, {}, LogitsMode::kLast}}, &fo, opts).code(),
            absl::StatusCode::kInvalidArgument);
  ForwardOptions argmax;
  argmax.argmax_only = true;
  ForwardOutput ids, full;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &full).ok());
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &ids, argmax).ok());
  EXPECT_TRUE(ids.logits.empty());
  ASSERT_EQ(ids.argmax.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(ids.argmax[r], Argmax(full.row_logits(r), full.vocab_size)) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridTreeTest,
                         ::testing::Values("tiny_mamba2", "tiny_bamba", "tiny_mamba2_f16",
                                           "tiny_bamba_bf16", "tiny_bamba_bias"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace treespec
