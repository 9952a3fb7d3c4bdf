// Whole-model checks of the CUDA backend (ctest label `gpu`; every test skips
// itself without a GPU): logits of the tiny fixture models on CUDA (f16 and
// bf16 storage) against the CPU backend, tree verification against sequential
// decoding on the GPU, Mamba's graph-captured step against its eager step, and
// the Mamba-2 / Bamba fixtures through the tree scan and activation replay
// (trees, CommitPath, chains longer than the CUDA scan's chunk).
//
// Logits are compared row by row as max|a - ref| <= atol + rtol · max|ref|
// (the row's scale), with bounds per storage dtype. The measured error is
// printed so the bounds can be tightened from GPU runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "core/model/mamba.h"
#include "core/model/sequence_model.h"
#include "core/model/ssm_state.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

// TREESPEC_FIXTURES overrides the fixture directory (the GPU machine runs
// binaries built elsewhere, whose compiled-in source path does not exist).
std::string FixtureDir(const std::string& name) {
  if (const char* env = std::getenv("TREESPEC_FIXTURES")) return std::string(env) + "/" + name;
  const std::string in_tree = testing::SourceDir() + "/tests/fixtures/models/" + name;
  if (std::filesystem::exists(in_tree)) return in_tree;
  return "tests/fixtures/models/" + name;
}

struct Bound {
  double atol, rtol;
};

// Compares two [rows, V] logit matrices row by row; returns the worst
// max|a - ref| / max|ref| seen (for the log).
double ExpectLogitsClose(const std::vector<float>& got, const std::vector<float>& ref,
                         int64_t V, Bound bound, const std::string& what) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  double worst = 0.0;
  for (size_t row = 0; row * V < std::min(got.size(), ref.size()); ++row) {
    double err = 0.0, scale = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double a = got[row * V + v], r = ref[row * V + v];
      err = std::max(err, std::isnan(a) ? INFINITY : std::fabs(a - r));
      scale = std::max(scale, std::fabs(r));
    }
    worst = std::max(worst, err / std::max(scale, 1e-6));
    EXPECT_LE(err, bound.atol + bound.rtol * scale)
        << what << " row " << row << ": max |err| " << err << ", row scale " << scale;
  }
  return worst;
}

class GpuModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto b = CreateBackend(GetParam());
    if (!b.ok()) {
      const std::string why(b.status().message());
      GTEST_SKIP() << (absl::StartsWith(why, "no CUDA device") ? "" : "no CUDA device: ") << why;
    }
    gpu_ = std::move(*b);
    cpu_ = CreateCpuBackend();
    bound_ = gpu_->activation_dtype() == DType::kF16 ? Bound{1e-2, 2e-2} : Bound{4e-2, 8e-2};
  }

  void Report(const std::string& what, double worst) {
    std::printf("[ measured ] %s on %s: worst max|err|/max|ref| = %.3g\n", what.c_str(),
                GetParam().c_str(), worst);
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  Bound bound_{};
};

// Runs a prompt, three decode steps and a token tree; returns all logits.
std::vector<float> RunLlama(LlamaModel* model, PagedKvCache* cache) {
  std::vector<float> all;
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 23, 64, 8, 77, 31, 2, 90, 11, 54, 3, 120, 6, 44, 19, 71};
  const int64_t seq = cache->CreateSequence();
  EXPECT_TRUE(cache->Reserve(seq, 64).ok());
  ForwardOutput fo;
  absl::Status s = model->Forward({{seq, prompt, {}, LogitsMode::kAll}}, cache, &fo);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(cache->Commit(seq, prompt.size()).ok());
  all.insert(all.end(), fo.logits.begin(), fo.logits.end());
  for (int32_t t : {7, 100, 12}) {
    EXPECT_TRUE(model->Forward({{seq, {t}, {}, LogitsMode::kLast}}, cache, &fo).ok());
    EXPECT_TRUE(cache->Commit(seq, 1).ok());
    all.insert(all.end(), fo.logits.begin(), fo.logits.end());
  }
  const std::vector<int32_t> tree = {9, 10, 11, 12, 13, 14, 15};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 5};
  EXPECT_TRUE(model->Forward({{seq, tree, parents, LogitsMode::kAll}}, cache, &fo).ok());
  all.insert(all.end(), fo.logits.begin(), fo.logits.end());
  return all;
}

TEST_P(GpuModelTest, LlamaFixtureLogitsMatchCpu) {
  for (const char* name : {"tiny_llama_gqa", "tiny_llama3", "tiny_llama_gqa_f16",
                           "tiny_llama_gqa_bf16"}) {
    SCOPED_TRACE(name);
    const std::string dir = FixtureDir(name);
    if (!std::filesystem::exists(dir + "/config.json")) {
      ADD_FAILURE() << "fixture missing: " << dir;
      continue;
    }
    std::vector<float> logits[2];
    Backend* backends[2] = {cpu_.get(), gpu_.get()};
    for (int i = 0; i < 2; ++i) {
      auto model = LlamaModel::Load(dir, backends[i]);
      ASSERT_TRUE(model.ok()) << model.status();
      auto cache = PagedKvCache::Create((*model)->KvOptions(32, 4), backends[i]);
      ASSERT_TRUE(cache.ok()) << cache.status();
      logits[i] = RunLlama(model->get(), cache->get());
    }
    const int64_t V = 128;
    Report(std::string("llama ") + name, ExpectLogitsClose(logits[1], logits[0], V, bound_, name));
  }
}

// Every tree node's logits equal those of decoding its root-to-node path one
// token at a time, on the GPU (different batching, so within rounding).
TEST_P(GpuModelTest, TreeVerificationEqualsSequentialDecode) {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 128;
  c.intermediate_size = 192;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 512;
  WeightLoader loader(/*seed=*/7, /*scale=*/0.1f, gpu_.get());
  auto model = LlamaModel::Create(c, &loader, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  auto cache_or = PagedKvCache::Create((*model)->KvOptions(128, 16), gpu_.get());
  ASSERT_TRUE(cache_or.ok()) << cache_or.status();
  PagedKvCache* cache = cache_or->get();
  auto sequential = [&](const std::vector<int32_t>& tokens) {
    const int64_t seq = cache->CreateSequence();
    EXPECT_TRUE(cache->Reserve(seq, tokens.size()).ok());
    ForwardOutput fo;
    for (int32_t t : tokens) {
      EXPECT_TRUE((*model)->Forward({{seq, {t}, {}, LogitsMode::kLast}}, cache, &fo).ok());
      EXPECT_TRUE(cache->Commit(seq, 1).ok());
    }
    cache->Release(seq);
    return fo.logits;
  };
  std::vector<int32_t> prefix;
  for (int i = 0; i < 40; ++i) prefix.push_back((i * 37 + 5) % 97);
  const std::vector<int32_t> tokens = {66, 70, 71, 72, 73, 74, 75, 76, 77, 78};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3, 6, 7, 5};
  const int64_t seq = cache->CreateSequence();
  ASSERT_TRUE(cache->Reserve(seq, prefix.size() + tokens.size()).ok());
  ForwardOutput fo;
  ASSERT_TRUE((*model)->Forward({{seq, prefix, {}, LogitsMode::kNone}}, cache, &fo).ok());
  ASSERT_TRUE(cache->Commit(seq, prefix.size()).ok());
  ASSERT_TRUE((*model)->Forward({{seq, tokens, parents, LogitsMode::kAll}}, cache, &fo).ok());
  double worst = 0.0;
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> full = prefix, path;
    for (int n = static_cast<int>(node); n >= 0; n = parents[n]) path.insert(path.begin(), tokens[n]);
    full.insert(full.end(), path.begin(), path.end());
    const std::vector<float> ref = sequential(full);
    const std::vector<float> got(fo.logits.begin() + node * 97, fo.logits.begin() + (node + 1) * 97);
    worst = std::max(worst, ExpectLogitsClose(got, ref, 97, bound_, "node " + std::to_string(node)));
  }
  Report("tree vs sequential", worst);
}

std::vector<float> RunMamba(MambaModel* model, MambaStatePool* pool, bool graphs) {
  model->SetUseGraphs(graphs);
  std::vector<float> all, logits;
  std::vector<int32_t> slots;
  EXPECT_TRUE(pool->AllocateMany(5, &slots).ok());
  const std::vector<int32_t> prompt = {3, 9, 27, 81, 115, 37, 111, 77};
  EXPECT_TRUE(model->Prefill(prompt, slots[0], pool, &logits, /*all_logits=*/true).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  EXPECT_TRUE(pool->Copy({slots[0], slots[0], slots[0], slots[0]},
                         {slots[1], slots[2], slots[3], slots[4]}).ok());
  // Batch sizes 3, 5, 3 (a replay with new inputs), 1, 5 (replay).
  const std::vector<std::vector<int32_t>> steps = {
      {slots[0], slots[1], slots[2]}, slots, {slots[4], slots[2], slots[0]}, {slots[3]}, slots};
  int t = 1;
  for (const std::vector<int32_t>& s : steps) {
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < s.size(); ++i) tokens.push_back((t++ * 29) % 128);
    absl::Status st = model->Step(tokens, s, pool, &logits);
    EXPECT_TRUE(st.ok()) << st;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST_P(GpuModelTest, MambaFixtureLogitsMatchCpu) {
  const std::string dir = FixtureDir("tiny_mamba");
  ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << "fixture missing: " << dir;
  std::vector<float> logits[2];
  Backend* backends[2] = {cpu_.get(), gpu_.get()};
  for (int i = 0; i < 2; ++i) {
    auto model = MambaModel::Load(dir, backends[i]);
    ASSERT_TRUE(model.ok()) << model.status();
    auto pool = MambaStatePool::Create((*model)->config(), 8, backends[i]);
    ASSERT_TRUE(pool.ok()) << pool.status();
    logits[i] = RunMamba(model->get(), pool->get(), /*graphs=*/false);
  }
  Report("mamba tiny_mamba", ExpectLogitsClose(logits[1], logits[0], 128, bound_, "tiny_mamba"));
}

// A 70-token prompt (deeper than the CUDA tree scan's chunk of 64 rows),
// decode steps, a token tree, CommitPath (activation replay), part of a chain
// committed (replay again), and two sequences batched with trees; returns all
// logits and, for a pure Mamba-2 model, the committed state after the first
// CommitPath in `state`.
std::vector<float> RunHybrid(SequenceModel* model, std::vector<float>* state) {
  std::vector<float> all;
  ForwardOutput fo;
  auto forward = [&](const std::vector<ForwardSeq>& seqs) {
    absl::Status st = model->Forward(seqs, &fo);
    EXPECT_TRUE(st.ok()) << st;
    all.insert(all.end(), fo.logits.begin(), fo.logits.end());
  };
  auto ok = [](const absl::Status& st) { EXPECT_TRUE(st.ok()) << st; };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back((i * 37 + 11) % 128);
  const absl::StatusOr<int64_t> a = model->Open(160), b = model->Open(64);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return all;
  forward({{*a, prompt, {}, LogitsMode::kAll}});
  ok(model->Commit(*a, static_cast<int64_t>(prompt.size())));
  for (int32_t t : {7, 100, 12}) {
    forward({{*a, {t}, {}, LogitsMode::kLast}});
    ok(model->Commit(*a, 1));
  }
  const std::vector<int32_t> tree = {9, 10, 11, 12, 13, 14, 15, 16};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3, 6};
  forward({{*a, tree, parents, LogitsMode::kAll}});
  ok(model->CommitPath(*a, {0, 1, 3, 6, 7}));
  if (model->info().is_recurrent) {
    absl::StatusOr<SequenceSnapshot> snap = model->SnapshotState(*a);
    EXPECT_TRUE(snap.ok()) << snap.status();
    if (snap.ok()) *state = snap->data;
  }
  forward({{*b, {5, 6, 7, 8}, {}, LogitsMode::kAll}, {*a, {20, 21, 22}, {}, LogitsMode::kAll}});
  ok(model->Commit(*b, 4));
  ok(model->Commit(*a, 2));
  forward({{*a, tree, parents, LogitsMode::kAll}, {*b, tree, parents, LogitsMode::kAll}});
  ok(model->CommitPath(*a, {0, 2, 5}));
  ok(model->CommitPath(*b, {0, 1, 4}));
  forward({{*a, {30}, {}, LogitsMode::kLast}, {*b, {31}, {}, LogitsMode::kLast}});
  model->Release(*a);
  model->Release(*b);
  return all;
}

TEST_P(GpuModelTest, Mamba2AndBambaFixtureLogitsMatchCpu) {
  for (const char* name : {"tiny_mamba2", "tiny_mamba2_f16", "tiny_mamba2_bf16", "tiny_bamba",
                           "tiny_bamba_f16", "tiny_bamba_bf16"}) {
    SCOPED_TRACE(name);
    const std::string dir = FixtureDir(name);
    if (!std::filesystem::exists(dir + "/config.json")) {
      ADD_FAILURE() << "fixture missing: " << dir;
      continue;
    }
    SequenceModelOptions options;
    options.kv_blocks = 64;
    options.kv_block_size = 8;
    options.max_sequences = 4;
    options.max_tail_nodes = 16;
    std::vector<float> logits[2], state[2];
    Backend* backends[2] = {cpu_.get(), gpu_.get()};
    for (int i = 0; i < 2; ++i) {
      auto model = LoadSequenceModel(dir, backends[i], nullptr, options);
      ASSERT_TRUE(model.ok()) << model.status();
      logits[i] = RunHybrid(model->get(), &state[i]);
    }
    ASSERT_FALSE(logits[0].empty());
    Report(std::string("hybrid ") + name, ExpectLogitsClose(logits[1], logits[0], 128, bound_, name));
    if (!state[0].empty()) {  // one "row": the whole replayed state, against its largest value
      Report(std::string("replayed state ") + name,
             ExpectLogitsClose(state[1], state[0], static_cast<int64_t>(state[0].size()), bound_,
                               std::string(name) + " state after CommitPath"));
    }
  }
}

// The captured step replays the same kernels on the same buffers, so graph and
// eager runs should agree to the last bit; the bound (a quarter of the
// CPU-comparison one) still allows for cuBLAS picking another algorithm under
// capture, while a replay that read stale inputs or states would be far off.
TEST_P(GpuModelTest, MambaGraphStepEqualsEager) {
  MambaConfig c;
  c.vocab_size = 128;
  c.hidden_size = 96;
  c.intermediate_size = 192;
  c.num_layers = 3;
  c.state_size = 16;
  c.conv_kernel = 4;
  c.time_step_rank = 6;
  WeightLoader loader(/*seed=*/11, /*scale=*/0.1f, gpu_.get());
  auto model = MambaModel::Create(c, &loader);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> logits[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    auto pool = MambaStatePool::Create(c, 8, gpu_.get());
    ASSERT_TRUE(pool.ok()) << pool.status();
    logits[graphs] = RunMamba(model->get(), pool->get(), graphs == 1);
  }
  const Bound tight{bound_.atol / 4, bound_.rtol / 4};
  Report("mamba graph vs eager", ExpectLogitsClose(logits[1], logits[0], 128, tight, "graph"));
}

INSTANTIATE_TEST_SUITE_P(CudaDtypes, GpuModelTest, ::testing::Values("cuda", "cuda:bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "cuda" ? std::string("f16") : std::string("bf16");
                         });

}  // namespace
}  // namespace treespec
