// treespec's HybridModel on the Mamba-2 and Bamba fixtures against Hugging
// Face transformers 5 (tests/golden/data/tiny_{mamba2,bamba}[_f16|_bf16],
// tools/goldens/make_mamba2_goldens.py): logits at every prompt position
// (transformers runs its chunked scan, chunk_size 8, so the prompts cross
// chunks), the final conv and SSM states of the Mamba-2 layers after the
// prompt, the same reached token by token, and greedy continuations
// (transformers decodes them with its one-token recurrent step). f16 / bf16
// fixtures keep their weights in that type (CpuWeights::kAuto) while
// transformers widens them to float32: the products are the same, only the
// summation order may differ. The _bias fixtures take the other branches:
// projection, attention and MLP biases, no conv bias, tied embeddings, one
// group for Mamba2 and two for Bamba, the attention layer first.
//
// Tolerance: the row error of golden_data.h (max |a − ref| / max |ref| per
// position, or per layer of a state) ≤ 1e-4, as for Llama and Mamba.
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/model/hybrid_sequence_model.h"
#include "core/model/safetensors.h"
#include "core/model/sequence_model.h"
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

class HybridGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    const bool typed = name.ends_with("_f16") || name.ends_with("_bf16");
    backend_ = CreateCpuBackend(1, typed ? CpuWeights::kAuto : CpuWeights::kF32);
    auto golden = LoadGoldenSet(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = std::move(*golden);
    ASSERT_EQ(golden_.prompts.size(), 3u);
    SequenceModelOptions o;
    o.kv_blocks = 64;
    o.kv_block_size = 16;
    o.max_sequences = 4;
    o.max_tail_nodes = 16;
    auto m = LoadSequenceModel(FixtureDir(name), backend_.get(), nullptr, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_.reset(dynamic_cast<HybridSequenceModel*>(m->release()));
    ASSERT_NE(model_, nullptr);
    vocab_ = model_->info().vocab_size;
  }

  // The committed state of `h` against the golden conv and SSM states.
  void ExpectStates(int64_t h, const ::treespec::testing::GoldenPrompt& p, const std::string& how) {
    auto got = model_->CommittedState(h);
    ASSERT_TRUE(got.ok()) << got.status();
    auto conv = ReadGoldenNpy(golden_, p.conv_state);
    auto ssm = ReadGoldenNpy(golden_, p.ssm_state);
    ASSERT_TRUE(conv.ok() && ssm.ok());
    const int64_t layers = conv->shape[0];
    ASSERT_EQ(got->size(), conv->f32.size() + ssm->f32.size());
    auto ec = MaxRowRelError(got->data(), conv->f32.data(), layers, conv->numel() / layers);
    auto es = MaxRowRelError(got->data() + conv->f32.size(), ssm->f32.data(), layers,
                             ssm->numel() / layers);
    EXPECT_LE(ec.max_rel, kTolerance) << how << " conv state of " << p.name << ": " << ec.Describe();
    EXPECT_LE(es.max_rel, kTolerance) << how << " ssm state of " << p.name << ": " << es.Describe();
    worst_state_ = std::max({worst_state_, ec.max_rel, es.max_rel});
  }

  std::unique_ptr<Backend> backend_;
  GoldenSet golden_;
  std::unique_ptr<HybridSequenceModel> model_;
  int64_t vocab_ = 0;
  double worst_state_ = 0.0;
};

TEST_P(HybridGoldenTest, PromptLogitsAndStatesMatchTransformers) {
  double worst = 0.0;
  for (const auto& p : golden_.prompts) {
    auto ref = ReadGoldenNpy(golden_, p.logits);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto h = model_->Open(128);
    ASSERT_TRUE(h.ok()) << h.status();
    ForwardOutput fo;
    ASSERT_TRUE(model_->Forward({{*h, p.ids, {}, LogitsMode::kAll}}, &fo).ok());
    ASSERT_EQ(fo.logits.size(), ref->f32.size());
    auto err = MaxRowRelError(fo.logits.data(), ref->f32.data(), p.ids.size(), vocab_);
    EXPECT_LE(err.max_rel, kTolerance) << "prompt " << p.name << ": " << err.Describe();
    worst = std::max(worst, err.max_rel);
    ASSERT_TRUE(model_->Commit(*h, static_cast<int64_t>(p.ids.size())).ok());
    ExpectStates(*h, p, "prompt");
    model_->Release(*h);
  }
  std::printf("[golden] %s logits: max rel error %.3g; states: %.3g\n", GetParam().c_str(), worst,
              worst_state_);
}

TEST_P(HybridGoldenTest, TokenByTokenReachesTheSameStates) {
  for (const auto& p : golden_.prompts) {
    auto h = model_->Open(128);
    ASSERT_TRUE(h.ok()) << h.status();
    for (int32_t t : p.ids) {
      ForwardOutput fo;
      ASSERT_TRUE(model_->Forward({{*h, {t}, {}, LogitsMode::kNone}}, &fo).ok());
      ASSERT_TRUE(model_->Commit(*h, 1).ok());
    }
    ExpectStates(*h, p, "token by token");
    model_->Release(*h);
  }
}

TEST_P(HybridGoldenTest, GreedyContinuationMatchesTransformers) {
  for (const auto& p : golden_.prompts) {
    ASSERT_FALSE(p.greedy_new_ids.empty());
    auto h = model_->Open(128);
    ASSERT_TRUE(h.ok()) << h.status();
    ForwardOutput fo;
    ASSERT_TRUE(model_->Forward({{*h, p.ids, {}, LogitsMode::kLast}}, &fo).ok());
    ASSERT_TRUE(model_->Commit(*h, static_cast<int64_t>(p.ids.size())).ok());
    std::vector<int32_t> got;
    while (true) {
      got.push_back(Argmax(fo.logits.data(), vocab_));
      if (got.size() == p.greedy_new_ids.size()) break;
      ASSERT_TRUE(model_->Forward({{*h, {got.back()}, {}, LogitsMode::kLast}}, &fo).ok());
      ASSERT_TRUE(model_->Commit(*h, 1).ok());
    }
    EXPECT_EQ(got, p.greedy_new_ids) << "prompt " << p.name;
    model_->Release(*h);
  }
}

// The variants really hold the weights they are named after.
TEST_P(HybridGoldenTest, FixtureHasTheAdvertisedDType) {
  auto ckpt = Checkpoint::Open(FixtureDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::set<DType> dtypes;
  for (const auto& [name, info] : (*ckpt)->tensors()) dtypes.insert(info.dtype);
  const std::string& name = GetParam();
  const DType want = name.ends_with("_bf16")  ? DType::kBF16
                     : name.ends_with("_f16") ? DType::kF16
                                              : DType::kF32;
  EXPECT_EQ(dtypes, std::set<DType>{want});
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridGoldenTest,
                         ::testing::Values("tiny_mamba2", "tiny_mamba2_f16", "tiny_mamba2_bf16",
                                           "tiny_bamba", "tiny_bamba_f16", "tiny_bamba_bf16",
                                           "tiny_mamba2_bias", "tiny_bamba_bias"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace treespec
