// treespec's Llama on the tiny fixtures (tests/fixtures/models) against Hugging
// Face transformers (tests/golden/data, tools/goldens/make_goldens.py): logits
// at every prompt position, chunked / token-by-token decode, RoPE frequencies
// (llama3 scaling) and greedy continuations, for every dtype and shard layout.
//
// Tolerance: the row error of golden_data.h, max_v |a − ref| / max_v |ref| per
// position, must be ≤ 1e-4 (both sides compute in float32; f16/bf16 weights are
// widened on load, exactly as transformers does with torch_dtype=float32).
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/safetensors.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"

namespace treespec {
namespace {

using ::treespec::testing::Argmax;
using ::treespec::testing::FixtureDir;
using ::treespec::testing::GoldenSet;
using ::treespec::testing::LoadGoldenSet;
using ::treespec::testing::MaxRowRelError;
using ::treespec::testing::ReadGoldenNpy;

constexpr double kTolerance = 1e-4;

ForwardSeq Chain(int64_t kv_seq, std::vector<int32_t> tokens, LogitsMode mode) {
  ForwardSeq s;
  s.kv_seq = kv_seq;
  s.tokens = std::move(tokens);
  s.logits = mode;
  return s;
}

class LlamaGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    auto golden = LoadGoldenSet(GetParam());
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = std::move(*golden);
    auto model = LlamaModel::Load(FixtureDir(GetParam()), backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto cache = PagedKvCache::Create(model_->KvOptions(/*num_blocks=*/64, /*block_size=*/8),
                                      backend_.get());
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
    vocab_ = model_->config().vocab_size;
  }

  // Runs `chunks` (consecutive pieces of one sequence) with all logits; returns
  // the logits of every token [sum of chunk sizes, vocab].
  std::vector<float> RunChunks(const std::vector<std::vector<int32_t>>& chunks) {
    int64_t seq = cache_->CreateSequence();
    std::vector<float> all;
    for (const auto& c : chunks) {
      EXPECT_TRUE(cache_->Reserve(seq, cache_->length(seq) + c.size()).ok());
      ForwardOutput out;
      absl::Status s = model_->Forward({Chain(seq, c, LogitsMode::kAll)}, cache_.get(), &out);
      EXPECT_TRUE(s.ok()) << s;
      EXPECT_TRUE(cache_->Commit(seq, c.size()).ok());
      all.insert(all.end(), out.logits.begin(), out.logits.end());
    }
    cache_->Release(seq);
    return all;
  }

  std::unique_ptr<Backend> backend_;
  GoldenSet golden_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
  int64_t vocab_ = 0;
};

TEST_P(LlamaGoldenTest, PrefillLogitsMatchTransformers) {
  ASSERT_GE(golden_.prompts.size(), 3u);
  double worst = 0.0;
  for (const auto& p : golden_.prompts) {
    auto ref = ReadGoldenNpy(golden_, p.logits);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(ref->shape, (std::vector<int64_t>{static_cast<int64_t>(p.ids.size()), vocab_}));
    std::vector<float> got = RunChunks({p.ids});
    ASSERT_EQ(got.size(), ref->f32.size());
    auto err = MaxRowRelError(got.data(), ref->f32.data(), p.ids.size(), vocab_);
    EXPECT_LE(err.max_rel, kTolerance)
        << GetParam() << " prompt " << p.name << ": " << err.Describe();
    worst = std::max(worst, err.max_rel);
  }
  std::printf("[golden] %s prefill logits: max rel error %.3g\n", GetParam().c_str(), worst);
}

// The KV-cache path: the same logits when the prompt arrives as a chunk and
// then one token per forward pass.
TEST_P(LlamaGoldenTest, ChunkedDecodeLogitsMatchTransformers) {
  for (const auto& p : golden_.prompts) {
    auto ref = ReadGoldenNpy(golden_, p.logits);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const size_t first = p.ids.size() / 2;
    std::vector<std::vector<int32_t>> chunks = {{p.ids.begin(), p.ids.begin() + first}};
    for (size_t i = first; i < p.ids.size(); ++i) chunks.push_back({p.ids[i]});
    if (chunks[0].empty()) chunks.erase(chunks.begin());
    std::vector<float> got = RunChunks(chunks);
    ASSERT_EQ(got.size(), ref->f32.size());
    auto err = MaxRowRelError(got.data(), ref->f32.data(), p.ids.size(), vocab_);
    EXPECT_LE(err.max_rel, kTolerance)
        << GetParam() << " prompt " << p.name << ": " << err.Describe();
  }
}

TEST_P(LlamaGoldenTest, GreedyContinuationMatchesTransformers) {
  for (const auto& p : golden_.prompts) {
    ASSERT_FALSE(p.greedy_new_ids.empty());
    int64_t seq = cache_->CreateSequence();
    ASSERT_TRUE(cache_->Reserve(seq, p.ids.size() + p.greedy_new_ids.size()).ok());
    ForwardOutput out;
    ASSERT_TRUE(model_->Forward({Chain(seq, p.ids, LogitsMode::kLast)}, cache_.get(), &out).ok());
    ASSERT_TRUE(cache_->Commit(seq, p.ids.size()).ok());
    std::vector<int32_t> got;
    while (got.size() < p.greedy_new_ids.size()) {
      got.push_back(Argmax(out.row_logits(0), vocab_));
      if (got.size() == p.greedy_new_ids.size()) break;
      ASSERT_TRUE(
          model_->Forward({Chain(seq, {got.back()}, LogitsMode::kLast)}, cache_.get(), &out).ok());
      ASSERT_TRUE(cache_->Commit(seq, 1).ok());
    }
    cache_->Release(seq);
    EXPECT_EQ(got, p.greedy_new_ids) << GetParam() << " prompt " << p.name;
  }
}

TEST_P(LlamaGoldenTest, RopeFrequenciesMatchTransformers) {
  auto ref = ReadGoldenNpy(golden_, "rope_inv_freq.npy");
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<float> got = model_->config().InvFreq();
  ASSERT_EQ(got.size(), ref->f32.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], ref->f32[i], 1e-6 * std::fabs(ref->f32[i])) << "inv_freq " << i;
  }
}

// The variants really exercise what they are named after.
TEST_P(LlamaGoldenTest, FixtureHasTheAdvertisedLayout) {
  auto ckpt = Checkpoint::Open(FixtureDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::set<std::string> files;
  std::set<DType> dtypes;
  for (const auto& [name, info] : (*ckpt)->tensors()) {
    files.insert(info.file);
    dtypes.insert(info.dtype);
  }
  const std::string& name = GetParam();
  const DType want = name.ends_with("_bf16")  ? DType::kBF16
                     : name.ends_with("_f16") ? DType::kF16
                                              : DType::kF32;
  EXPECT_EQ(dtypes, std::set<DType>{want});
  EXPECT_EQ(files.size() >= 2, name.ends_with("_sharded")) << files.size() << " files";
  if (name == "tiny_llama3") {
    const LlamaConfig& c = model_->config();
    ASSERT_TRUE(c.rope_scaling.has_value());
    EXPECT_EQ(c.rope_scaling->type, "llama3");
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_NE(c.head_dim, c.hidden_size / c.num_heads);
    EXPECT_GE(golden_.prompts[0].ids.size(), 48u);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaGoldenTest,
                         ::testing::Values("tiny_llama_gqa", "tiny_llama_gqa_bf16",
                                           "tiny_llama_gqa_f16", "tiny_llama_gqa_sharded",
                                           "tiny_llama3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace treespec
