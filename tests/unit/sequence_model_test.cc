// SequenceModel, the one per-sequence model interface, for every model kind
// (Llama on tiny_llama_gqa, Mamba on tiny_mamba, Mamba-2 on tiny_mamba2, the
// Mamba-2 + attention hybrid on tiny_bamba), loaded by the factory:
//  - a packed tree after a cached prefix gives every node the logits of
//    decoding its root-to-node path as a plain sequence;
//  - a tree grown over several calls (num_prior) equals the tree in one call;
//  - CommitPath keeps exactly the path: continuing afterwards equals a fresh
//    sequence fed the whole history;
//  - Release gives the memory back; bad input and unknown handles are clear
//    errors; Mamba commits a chain whole, Mamba-2 also part of one;
//  - Mamba and Mamba-2 snapshot, restore and copy state; Llama and the
//    hybrid (a KV cache is state too) say UNIMPLEMENTED;
//  - Llama, Mamba-2 and the hybrid return the hidden states of requested
//    layers: the last layer's, through the final norm and the LM head,
//    reproduces the logits;
//  - argmax_only returns each logits row's argmax (on the device) and no logits.
#include "core/model/sequence_model.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/mamba_sequence_model.h"
#include "core/model/safetensors.h"
#include "core/spec/sampling.h"
#include "core/tensor/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kV = 128;

std::string ModelDir(const std::string& name) {
  return testing::SourceDir() + "/tests/fixtures/models/" + name;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 5, 127, 64, 3};
// root 12 with children 30, 31; 30 -> 40; 31 -> 41; 40 -> 50.
const std::vector<int32_t> kTree = {12, 30, 31, 40, 41, 50};
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 2, 3};

void ExpectClose(const float* got, const float* want, const std::string& what) {
  double scale = 0;
  for (int64_t t = 0; t < kV; ++t) scale = std::max(scale, std::fabs(double{want[t]}));
  for (int64_t t = 0; t < kV; ++t) {
    ASSERT_NEAR(got[t], want[t], 1e-5 + 2e-4 * scale) << what << " token " << t;
  }
}

class SequenceModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    model_ = Load();
  }
  std::unique_ptr<SequenceModel> Load() {
    SequenceModelOptions o;
    o.kv_blocks = 64;
    o.kv_block_size = 8;
    o.max_sequences = 4;
    o.max_tail_nodes = 16;
    auto m = LoadSequenceModel(ModelDir(GetParam()), backend_.get(), nullptr, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // A sequence with `prefix` committed.
  int64_t OpenWith(const std::vector<int32_t>& prefix) {
    absl::StatusOr<int64_t> h = model_->Open(128);
    EXPECT_TRUE(h.ok()) << h.status();
    ForwardOutput fo;
    EXPECT_TRUE(model_->Forward({{*h, prefix, {}, LogitsMode::kNone}}, &fo).ok());
    EXPECT_TRUE(model_->Commit(*h, static_cast<int64_t>(prefix.size())).ok());
    return *h;
  }
  // Next-token logits after `history`, fed as one chain to a fresh sequence.
  std::vector<float> Reference(const std::vector<int32_t>& history) {
    absl::StatusOr<int64_t> h = model_->Open(128);
    EXPECT_TRUE(h.ok()) << h.status();
    ForwardOutput fo;
    absl::Status st = model_->Forward({{*h, history, {}, LogitsMode::kLast}}, &fo);
    EXPECT_TRUE(st.ok()) << st;
    model_->Release(*h);
    return fo.logits;
  }
  static std::vector<int32_t> PathTo(int32_t node) {
    std::vector<int32_t> path;
    for (int32_t v = node; v >= 0; v = kParents[v]) path.insert(path.begin(), v);
    return path;
  }
  std::vector<int32_t> History(int32_t node) {
    std::vector<int32_t> h = kPrompt;
    for (int32_t v : PathTo(node)) h.push_back(kTree[v]);
    return h;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SequenceModel> model_;
};

TEST_P(SequenceModelTest, TreeNodesSeeExactlyTheirPath) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &fo).ok());
  ASSERT_EQ(fo.row_start, (std::vector<int32_t>{0, 6}));
  for (int32_t node = 0; node < 6; ++node) {
    const std::vector<float> want = Reference(History(node));
    ExpectClose(fo.row_logits(node), want.data(), "node " + std::to_string(node));
  }
}

TEST_P(SequenceModelTest, TreeGrownOverSeveralCallsEqualsOneCall) {
  const int64_t whole = OpenWith(kPrompt);
  ForwardOutput all;
  ASSERT_TRUE(model_->Forward({{whole, kTree, kParents, LogitsMode::kAll}}, &all).ok());
  const int64_t grown = OpenWith(kPrompt);
  // Level by level: {0}, {1, 2}, {3, 4}, {5}; the last call is batched with
  // a chain on another sequence.
  const int64_t other = OpenWith({9, 8});
  const std::vector<std::pair<int, int>> levels = {{0, 1}, {1, 3}, {3, 5}, {5, 6}};
  for (auto [a, b] : levels) {
    ForwardSeq fs{grown, std::vector<int32_t>(kTree.begin() + a, kTree.begin() + b),
                  std::vector<int32_t>(kParents.begin(), kParents.begin() + b), LogitsMode::kAll, a};
    std::vector<ForwardSeq> batch = {fs};
    if (b == 6) batch.push_back({other, {7}, {}, LogitsMode::kLast});
    ForwardOutput fo;
    ASSERT_TRUE(model_->Forward(batch, &fo).ok()) << "level " << a;
    ASSERT_EQ(fo.row_start[1], b - a);
    for (int i = a; i < b; ++i) {
      ExpectClose(fo.row_logits(i - a), all.row_logits(i), "node " + std::to_string(i));
    }
    if (b == 6) {
      ASSERT_EQ(fo.row_start[2], b - a + 1);
      const std::vector<float> want = Reference({9, 8, 7});
      ExpectClose(fo.row_logits(b - a), want.data(), "chain batched with the tree");
    }
  }
}

TEST_P(SequenceModelTest, CommitPathKeepsExactlyThePath) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kNone}}, &fo).ok());
  ASSERT_TRUE(model_->CommitPath(h, PathTo(4)).ok());  // 12, 31, 41
  EXPECT_EQ(model_->length(h), static_cast<int64_t>(kPrompt.size()) + 3);
  // Continue with a chain and with a tree: both see prompt + 12 31 41.
  ASSERT_TRUE(model_->Forward({{h, {77}, {-1}, LogitsMode::kAll}}, &fo).ok());
  std::vector<int32_t> history = History(4);
  history.push_back(77);
  std::vector<float> want = Reference(history);
  ExpectClose(fo.row_logits(0), want.data(), "tree root after CommitPath");
  ASSERT_TRUE(model_->Forward({{h, {77, 78}, {}, LogitsMode::kLast}}, &fo).ok());
  ASSERT_TRUE(model_->Commit(h, 2).ok());
  history.push_back(78);
  want = Reference(history);
  ExpectClose(fo.row_logits(0), want.data(), "chain after CommitPath");
  EXPECT_EQ(model_->length(h), static_cast<int64_t>(history.size()));
}

// ForkPath gives a new sequence in exactly the state CommitPath leaves (bit
// for bit: pre-drafting adopts forks in place of the real state) and leaves
// the source's tail untouched.
TEST_P(SequenceModelTest, ForkPathEqualsCommitPathBitForBit) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{h, kTree, kParents, LogitsMode::kNone}}, &fo).ok());
  absl::StatusOr<int64_t> fork = model_->ForkPath(h, PathTo(4), 128);
  ASSERT_TRUE(fork.ok()) << fork.status();
  absl::StatusOr<int64_t> fork_root = model_->ForkPath(h, {}, 128);
  ASSERT_TRUE(fork_root.ok()) << fork_root.status();
  EXPECT_EQ(model_->length(*fork), static_cast<int64_t>(kPrompt.size()) + 3);
  EXPECT_EQ(model_->length(*fork_root), static_cast<int64_t>(kPrompt.size()));
  EXPECT_EQ(model_->length(h), static_cast<int64_t>(kPrompt.size()));
  ForwardOutput from_fork;
  ASSERT_TRUE(model_->Forward({{*fork, {77}, {-1}, LogitsMode::kAll}}, &from_fork).ok());
  ASSERT_TRUE(model_->CommitPath(h, PathTo(4)).ok());
  ForwardOutput from_commit;
  ASSERT_TRUE(model_->Forward({{h, {77}, {-1}, LogitsMode::kAll}}, &from_commit).ok());
  ASSERT_EQ(from_fork.logits.size(), from_commit.logits.size());
  for (size_t t = 0; t < from_fork.logits.size(); ++t) {
    ASSERT_EQ(from_fork.logits[t], from_commit.logits[t]) << "token " << t;
  }
  model_->Release(*fork);
  model_->Release(*fork_root);
}

TEST_P(SequenceModelTest, ReleaseGivesMemoryBack) {
  const SequenceModelStats empty = model_->stats();
  EXPECT_EQ(empty.num_sequences, 0);
  EXPECT_EQ(empty.blocks_used, 0);
  const int64_t a = OpenWith(kPrompt);
  const int64_t b = OpenWith({3, 4});
  SequenceModelStats two = model_->stats();
  EXPECT_EQ(two.num_sequences, 2);
  EXPECT_GT(two.blocks_used, 0);
  EXPECT_EQ(two.blocks_used + two.blocks_free, empty.blocks_free);
  model_->Release(a);
  model_->Release(b);
  model_->Release(b);  // unknown: ignored
  EXPECT_EQ(model_->stats().blocks_used, 0);
  EXPECT_EQ(model_->stats().num_sequences, 0);
}

TEST_P(SequenceModelTest, BadInputIsAClearError) {
  const int64_t h = OpenWith(kPrompt);
  ForwardOutput fo;
  absl::Status st = model_->Forward({{h, {5, 500}, {}, LogitsMode::kLast}}, &fo);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("500"));
  st = model_->Forward({{h, {5, 6}, {-1, 1}, LogitsMode::kAll}}, &fo);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("parent of node 1"));
  st = model_->Forward({{h + 1000, {5}, {}, LogitsMode::kLast}}, &fo);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(model_->Open(0).status().code(), absl::StatusCode::kInvalidArgument);
  // The sequence still works after the failures.
  ASSERT_TRUE(model_->Forward({{h, {12}, {}, LogitsMode::kLast}}, &fo).ok());
  std::vector<int32_t> history = kPrompt;
  history.push_back(12);
  const std::vector<float> want = Reference(history);
  ExpectClose(fo.row_logits(0), want.data(), "after failures");
}

TEST_P(SequenceModelTest, RecurrentStateSnapshotsOrUnimplemented) {
  const int64_t a = OpenWith(kPrompt);
  const int64_t b = OpenWith({3});
  absl::StatusOr<SequenceSnapshot> snap = model_->SnapshotState(a);
  if (!model_->info().is_recurrent) {
    EXPECT_EQ(snap.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(model_->CopyState(a, b).code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(model_->RestoreState(a, {}).code(), absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(snap.ok()) << snap.status();
  std::vector<int32_t> history = kPrompt;
  history.push_back(12);
  const std::vector<float> want = Reference(history);
  // b takes a's state: feeding 12 gives a's next logits.
  ASSERT_TRUE(model_->CopyState(a, b).ok());
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{b, {12}, {}, LogitsMode::kLast}}, &fo).ok());
  ExpectClose(fo.row_logits(0), want.data(), "copied state");
  // a moves on, then is restored to the snapshot.
  ASSERT_TRUE(model_->Forward({{a, {50, 51}, {}, LogitsMode::kNone}}, &fo).ok());
  ASSERT_TRUE(model_->Commit(a, 2).ok());
  ASSERT_TRUE(model_->RestoreState(a, *snap).ok());
  ASSERT_TRUE(model_->Forward({{a, {12}, {}, LogitsMode::kLast}}, &fo).ok());
  ExpectClose(fo.row_logits(0), want.data(), "restored state");
  EXPECT_EQ(model_->RestoreState(a, SequenceSnapshot{{1.0f}}).code(),
            absl::StatusCode::kInvalidArgument);
  // Mamba's recurrent state is committed whole; Mamba-2 replays part of a
  // chain from its cached activations.
  ASSERT_TRUE(model_->Forward({{a, {12, 13, 14}, {}, LogitsMode::kNone}}, &fo).ok());
  if (model_->info().kind == ModelKind::kMamba) {
    EXPECT_EQ(model_->Commit(a, 2).code(), absl::StatusCode::kFailedPrecondition);
  } else {
    ASSERT_TRUE(model_->Commit(a, 2).ok());
    ASSERT_TRUE(model_->Forward({{a, {15}, {}, LogitsMode::kLast}}, &fo).ok());
    history.insert(history.end(), {13, 15});
    ExpectClose(fo.row_logits(0), Reference(history).data(), "after committing part of a chain");
  }
}

TEST_P(SequenceModelTest, LastHiddenStateThroughNormAndHeadGivesTheLogits) {
  const int64_t h = OpenWith(kPrompt);
  const int32_t last = static_cast<int32_t>(model_->info().num_layers - 1);
  ForwardOutput fo;
  ForwardOptions opts;
  opts.hidden_layers = {last, 0};
  absl::Status st = model_->Forward({{h, kTree, kParents, LogitsMode::kAll}}, &fo, opts);
  const ModelKind kind = model_->info().kind;
  if (kind == ModelKind::kMamba) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    return;
  }
  ASSERT_TRUE(st.ok()) << st;
  const int64_t D = model_->info().hidden_size, R = 6;
  ASSERT_EQ(fo.hidden.size(), static_cast<size_t>(2 * R * D));
  auto config = LoadModelConfig(ModelDir(GetParam()));
  ASSERT_TRUE(config.ok());
  auto ckpt = Checkpoint::Open(ModelDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const double eps = kind == ModelKind::kLlama ? config->llama.rms_norm_eps : config->hybrid.norm_eps;
  const char* norm_name = kind == ModelKind::kLlama    ? "model.norm.weight"
                          : kind == ModelKind::kMamba2 ? "backbone.norm_f.weight"
                                                       : "model.final_layernorm.weight";
  auto norm = (*ckpt)->Find(norm_name, {D});
  auto head = (*ckpt)->Find("lm_head.weight", {kV, D});
  ASSERT_TRUE(norm.ok() && head.ok());
  std::vector<float> g(D), w(kV * D);
  ConvertToF32((*norm)->data, (*norm)->dtype, D, g.data());
  ConvertToF32((*head)->data, (*head)->dtype, kV * D, w.data());
  for (int64_t r = 0; r < R; ++r) {
    const float* x = fo.hidden.data() + r * D;  // layer `last` comes first
    double ms = 0;
    for (int64_t d = 0; d < D; ++d) ms += double{x[d]} * x[d];
    const double inv = 1.0 / std::sqrt(ms / D + eps);
    std::vector<float> logits(kV);
    for (int64_t t = 0; t < kV; ++t) {
      double acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += x[d] * inv * g[d] * w[t * D + d];
      logits[t] = static_cast<float>(acc);
    }
    ExpectClose(logits.data(), fo.row_logits(r), "row " + std::to_string(r));
  }
  // Layer 0's state is a different one.
  double diff = 0;
  for (int64_t i = 0; i < R * D; ++i) diff += std::fabs(fo.hidden[i] - fo.hidden[R * D + i]);
  EXPECT_GT(diff, 1e-3);
  opts.hidden_layers = {last + 1};
  st = model_->Forward({{h, {12}, {}, LogitsMode::kLast}}, &fo, opts);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("hidden_layers[0]"));
}

TEST_P(SequenceModelTest, ArgmaxOnlyGivesEachRowsArgmax) {
  const int64_t h = OpenWith(kPrompt);
  const int64_t other = OpenWith({3, 4});
  const std::vector<ForwardSeq> batch = {{h, kTree, kParents, LogitsMode::kAll},
                                         {other, {9}, {}, LogitsMode::kLast}};
  ForwardOutput full;
  ASSERT_TRUE(model_->Forward(batch, &full).ok());
  ForwardOptions opts;
  opts.argmax_only = true;
  ForwardOutput ids;
  ASSERT_TRUE(model_->Forward(batch, &ids, opts).ok());
  EXPECT_TRUE(ids.logits.empty());
  EXPECT_EQ(ids.row_start, full.row_start);
  ASSERT_EQ(ids.argmax.size(), 7u);
  for (int r = 0; r < 7; ++r) EXPECT_EQ(ids.argmax[r], Argmax(full.row_logits(r), kV)) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Kinds, SequenceModelTest,
                         ::testing::Values("tiny_llama_gqa", "tiny_mamba", "tiny_mamba2",
                                           "tiny_bamba"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(SequenceModelFactoryTest, OptionsAndTensorParallelMambaAreRejected) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  SequenceModelOptions bad;
  bad.kv_block_size = 0;
  auto m = LoadSequenceModel(ModelDir("tiny_llama_gqa"), backend.get(), nullptr, bad);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("kv_block_size 0"));
  auto missing = LoadSequenceModel(ModelDir("no_such_model"), backend.get(), nullptr, {});
  EXPECT_FALSE(missing.ok());
}

// treespec-drafter --graphs reaches the Mamba model through the factory.
TEST(SequenceModelFactoryTest, UseGraphsReachesTheMambaModel) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  for (bool graphs : {true, false}) {
    SequenceModelOptions o;
    o.use_graphs = graphs;
    auto m = LoadSequenceModel(ModelDir("tiny_mamba"), backend.get(), nullptr, o);
    ASSERT_TRUE(m.ok()) << m.status();
    auto* mamba = dynamic_cast<MambaSequenceModel*>(m->get());
    ASSERT_NE(mamba, nullptr);
    EXPECT_EQ(mamba->model()->use_graphs(), graphs);
  }
}

}  // namespace
}  // namespace treespec
