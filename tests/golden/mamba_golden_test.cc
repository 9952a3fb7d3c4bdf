// treespec's Mamba on tests/fixtures/models/tiny_mamba against Hugging Face
// transformers (tests/golden/data/tiny_mamba): prefill logits and the final conv
// and SSM states (HF cache_params), greedy continuations; and treespec against
// itself: the recurrent Step equals the prefill scan, a batched Step equals
// single-slot Steps, and MambaStatePool Copy / Snapshot / Restore round-trip.
//
// Tolerances: vs transformers, the row error of golden_data.h (max_v |a − ref|
// / max_v |ref| per position or per layer) ≤ 1e-4; Step vs Prefill ≤ 1e-5 by
// the same measure; batched vs single and copied vs original states are exact.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/model/mamba.h"
#include "core/model/ssm_state.h"
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

constexpr double kGoldenTolerance = 1e-4;
constexpr double kSelfTolerance = 1e-5;
constexpr char kModel[] = "tiny_mamba";

class MambaGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    auto golden = LoadGoldenSet(kModel);
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = std::move(*golden);
    ASSERT_GE(golden_.prompts.size(), 3u);
    auto model = MambaModel::Load(FixtureDir(kModel), backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto pool = MambaStatePool::Create(model_->config(), /*num_slots=*/8, backend_.get());
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    const MambaConfig& c = model_->config();
    vocab_ = c.vocab_size;
    layers_ = c.num_layers;
  }

  int32_t NewSlot() {
    auto s = pool_->Allocate();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : 0;
  }

  // Compares a snapshot part ([layers, C, X]) with a golden .npy, per layer.
  void ExpectStateNear(const std::vector<float>& got, const std::string& file, double tol,
                       const std::string& what) {
    auto ref = ReadGoldenNpy(golden_, file);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(ref->shape.size(), 3u);
    ASSERT_EQ(ref->shape[0], layers_);
    ASSERT_EQ(got.size(), ref->f32.size()) << what;
    auto err = MaxRowRelError(got.data(), ref->f32.data(), layers_, ref->numel() / layers_);
    EXPECT_LE(err.max_rel, tol) << what << " (row = layer): " << err.Describe();
    worst_state_ = std::max(worst_state_, err.max_rel);
  }

  std::unique_ptr<Backend> backend_;
  GoldenSet golden_;
  std::unique_ptr<MambaModel> model_;
  std::unique_ptr<MambaStatePool> pool_;
  int64_t vocab_ = 0, layers_ = 0;
  double worst_state_ = 0.0;
};

TEST_F(MambaGoldenTest, PrefillLogitsAndStatesMatchTransformers) {
  double worst = 0.0;
  for (const auto& p : golden_.prompts) {
    auto ref = ReadGoldenNpy(golden_, p.logits);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const int32_t slot = NewSlot();
    std::vector<float> logits;
    ASSERT_TRUE(model_->Prefill(p.ids, slot, pool_.get(), &logits, /*all_logits=*/true).ok());
    ASSERT_EQ(logits.size(), ref->f32.size());
    auto err = MaxRowRelError(logits.data(), ref->f32.data(), p.ids.size(), vocab_);
    EXPECT_LE(err.max_rel, kGoldenTolerance) << "prompt " << p.name << ": " << err.Describe();
    worst = std::max(worst, err.max_rel);
    auto snap = pool_->Snapshot(slot);
    ASSERT_TRUE(snap.ok()) << snap.status();
    ExpectStateNear(snap->conv, p.conv_state, kGoldenTolerance, "conv state of " + p.name);
    ExpectStateNear(snap->ssm, p.ssm_state, kGoldenTolerance, "ssm state of " + p.name);
    pool_->Free(slot);
  }
  std::printf("[golden] tiny_mamba prefill logits: max rel error %.3g; states: %.3g\n", worst,
              worst_state_);
}

TEST_F(MambaGoldenTest, StepByStepEqualsPrefillScan) {
  for (const auto& p : golden_.prompts) {
    const int32_t a = NewSlot(), b = NewSlot();
    std::vector<float> prefill;
    ASSERT_TRUE(model_->Prefill(p.ids, a, pool_.get(), &prefill, /*all_logits=*/true).ok());
    std::vector<float> stepped;
    for (int32_t t : p.ids) {
      std::vector<float> logits;
      ASSERT_TRUE(model_->Step({t}, {b}, pool_.get(), &logits).ok());
      stepped.insert(stepped.end(), logits.begin(), logits.end());
    }
    auto err = MaxRowRelError(stepped.data(), prefill.data(), p.ids.size(), vocab_);
    EXPECT_LE(err.max_rel, kSelfTolerance) << "prompt " << p.name << ": " << err.Describe();
    // Stepping also leaves the same state (and matches transformers').
    auto snap = pool_->Snapshot(b);
    ASSERT_TRUE(snap.ok()) << snap.status();
    ExpectStateNear(snap->conv, p.conv_state, kGoldenTolerance, "stepped conv of " + p.name);
    ExpectStateNear(snap->ssm, p.ssm_state, kGoldenTolerance, "stepped ssm of " + p.name);
    pool_->Free(a);
    pool_->Free(b);
  }
}

TEST_F(MambaGoldenTest, GreedyContinuationMatchesTransformers) {
  for (const auto& p : golden_.prompts) {
    ASSERT_FALSE(p.greedy_new_ids.empty());
    const int32_t slot = NewSlot();
    std::vector<float> logits;
    ASSERT_TRUE(model_->Prefill(p.ids, slot, pool_.get(), &logits).ok());
    std::vector<int32_t> got;
    while (true) {
      got.push_back(Argmax(logits.data(), vocab_));
      if (got.size() == p.greedy_new_ids.size()) break;
      ASSERT_TRUE(model_->Step({got.back()}, {slot}, pool_.get(), &logits).ok());
    }
    EXPECT_EQ(got, p.greedy_new_ids) << "prompt " << p.name;
    pool_->Free(slot);
  }
}

// Several slots advanced by one batched Step give exactly what stepping each
// slot alone gives, over several steps with different tokens per slot.
TEST_F(MambaGoldenTest, BatchedStepEqualsSingleSlotSteps) {
  const size_t n = golden_.prompts.size();
  std::vector<int32_t> batched, single;
  std::vector<int32_t> next(n);
  for (size_t i = 0; i < n; ++i) {
    batched.push_back(NewSlot());
    single.push_back(NewSlot());
    std::vector<float> logits;
    const auto& ids = golden_.prompts[i].ids;
    ASSERT_TRUE(model_->Prefill(ids, batched[i], pool_.get(), &logits).ok());
    ASSERT_TRUE(model_->Prefill(ids, single[i], pool_.get(), &logits).ok());
    next[i] = Argmax(logits.data(), vocab_);
  }
  for (int step = 0; step < 6; ++step) {
    std::vector<float> batch_logits;
    ASSERT_TRUE(model_->Step(next, batched, pool_.get(), &batch_logits).ok());
    ASSERT_EQ(batch_logits.size(), n * vocab_);
    for (size_t i = 0; i < n; ++i) {
      std::vector<float> one;
      ASSERT_TRUE(model_->Step({next[i]}, {single[i]}, pool_.get(), &one).ok());
      auto err = MaxRowRelError(batch_logits.data() + i * vocab_, one.data(), 1, vocab_);
      EXPECT_LE(err.max_rel, kSelfTolerance)
          << "step " << step << " slot " << i << ": " << err.Describe();
    }
    for (size_t i = 0; i < n; ++i) {
      next[i] = Argmax(batch_logits.data() + i * vocab_, vocab_);
    }
  }
  // The batched slots are interleaved with the single ones; no state got mixed up.
  for (size_t i = 0; i < n; ++i) {
    auto a = pool_->Snapshot(batched[i]);
    auto b = pool_->Snapshot(single[i]);
    ASSERT_TRUE(a.ok() && b.ok());
    auto err = MaxRowRelError(a->ssm.data(), b->ssm.data(), 1, a->ssm.size());
    EXPECT_LE(err.max_rel, kSelfTolerance) << "slot " << i << ": " << err.Describe();
  }
}

// Copy A -> B then step both with the same token: identical logits. Snapshot A,
// step, Restore, step again with the same token: identical logits; restoring
// the snapshot into another slot reproduces them too.
TEST_F(MambaGoldenTest, StatePoolCopySnapshotRestoreRoundTrip) {
  const auto& pa = golden_.prompts[0].ids;
  const auto& pb = golden_.prompts[1].ids;
  const int32_t a = NewSlot(), b = NewSlot(), c = NewSlot();
  std::vector<float> la, lb;
  ASSERT_TRUE(model_->Prefill(pa, a, pool_.get(), &la).ok());
  ASSERT_TRUE(model_->Prefill(pb, b, pool_.get(), &lb).ok());
  const int32_t token = Argmax(la.data(), vocab_);

  ASSERT_TRUE(pool_->Copy({a}, {b}).ok());
  std::vector<float> both;
  ASSERT_TRUE(model_->Step({token, token}, {a, b}, pool_.get(), &both).ok());
  for (int64_t v = 0; v < vocab_; ++v) {
    ASSERT_EQ(both[v], both[vocab_ + v]) << "vocab " << v;
  }

  auto snap = pool_->Snapshot(a);
  ASSERT_TRUE(snap.ok()) << snap.status();
  std::vector<float> first, again, elsewhere;
  ASSERT_TRUE(model_->Step({7}, {a}, pool_.get(), &first).ok());
  ASSERT_TRUE(pool_->Restore(a, *snap).ok());
  ASSERT_TRUE(model_->Step({7}, {a}, pool_.get(), &again).ok());
  ASSERT_TRUE(pool_->Restore(c, *snap).ok());
  ASSERT_TRUE(model_->Step({7}, {c}, pool_.get(), &elsewhere).ok());
  EXPECT_EQ(first, again);
  EXPECT_EQ(first, elsewhere);

  // A snapshot of the wrong size is refused, not read past.
  MambaStateSnapshot bad;
  bad.conv.resize(3);
  bad.ssm.resize(3);
  EXPECT_EQ(pool_->Restore(a, bad).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace treespec
