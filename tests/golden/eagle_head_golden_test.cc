// treespec's EAGLE heads (core/model/eagle_head.h) on the demo target against
// the PyTorch reference (tools/train/eagle.py) through the goldens of
// tools/goldens/make_eagle_goldens.py (tests/golden/data/eagle/<head>/): the
// engine's target features equal PyTorch's, the head's rows over the real
// features (chain), and a depth-2 tree node fed the head's own output.
//
// Tolerance: golden_data.h's row error ≤ 1e-4 (float32 on both sides).
#include <memory>
#include <string>
#include <vector>

#include "core/model/eagle_head.h"
#include "core/model/llama.h"
#include "core/util/npy.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"

namespace treespec {
namespace {

using ::treespec::testing::MaxRowRelError;
using ::treespec::testing::SourceDir;

constexpr double kTolerance = 1e-4;

class EagleHeadGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    gdir_ = SourceDir() + "/tests/golden/data/eagle/" + GetParam();
    backend_ = CreateCpuBackend();
    auto head = EagleHead::Load(SourceDir() + "/models/demo/" + GetParam(),
                                SourceDir() + "/models/demo/target", backend_.get(), 64, 16);
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
    tokens_ = Npy("tokens.npy").i32;
    features_ = Npy("features.npy").f32;
    n_ = static_cast<int64_t>(tokens_.size());
    ASSERT_GT(n_, 4);
  }
  NpyArray Npy(const std::string& file) {
    auto a = ReadNpy(gdir_ + "/" + file);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : NpyArray{};
  }
  std::vector<int32_t> Tokens(int64_t begin, int64_t end) const {
    return std::vector<int32_t>(tokens_.begin() + begin, tokens_.begin() + end);
  }

  std::string gdir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<EagleHead> head_;
  std::vector<int32_t> tokens_;
  std::vector<float> features_;
  int64_t n_ = 0;
};

TEST_P(EagleHeadGoldenTest, EngineFeaturesMatchPyTorch) {
  auto target = LlamaModel::Load(SourceDir() + "/models/demo/target", backend_.get());
  ASSERT_TRUE(target.ok()) << target.status();
  auto cache = PagedKvCache::Create((*target)->KvOptions(16, 16), backend_.get());
  ASSERT_TRUE(cache.ok());
  const int64_t seq = (*cache)->CreateSequence();
  ASSERT_TRUE((*cache)->Reserve(seq, n_).ok());
  ForwardOptions options;
  options.hidden_layers = head_->info().target_layers;
  ForwardOutput out;
  // As the worker prefills a prompt for a feature-reading drafter: logits for
  // the last row only, hidden states for every row.
  ForwardSeq fs{seq, tokens_, {}, LogitsMode::kLast};
  fs.hidden_all = true;
  ASSERT_TRUE((*target)->Forward({fs}, cache->get(), &out, options).ok());
  EXPECT_EQ(out.row_start, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.hidden_row_start, (std::vector<int32_t>{0, static_cast<int32_t>(n_)}));
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(n_ * options.hidden_layers.size() *
                                                   head_->info().hidden_size));
  // out.hidden is [layers, rows, H]; the golden is [rows, layers * H].
  const int64_t H = head_->info().hidden_size, K = options.hidden_layers.size();
  std::vector<float> got(n_ * K * H);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t r = 0; r < n_; ++r) {
      std::copy_n(out.hidden.begin() + (k * n_ + r) * H, H, got.begin() + (r * K + k) * H);
    }
  }
  auto err = MaxRowRelError(got.data(), features_.data(), n_, K * H);
  EXPECT_LE(err.max_rel, kTolerance) << "row " << err.row;
}

TEST_P(EagleHeadGoldenTest, ChainRowsMatchPyTorch) {
  std::vector<float> g;
  ASSERT_TRUE(head_->Fuse(features_, n_, &g).ok());
  const int64_t H = head_->info().hidden_size, V = head_->info().vocab_size, R = n_ - 1;
  g.resize(R * H);  // rows 0..N-2: feature t with token t+1
  auto seq = head_->sequences()->Open(n_ + 4);
  ASSERT_TRUE(seq.ok());
  ForwardOutput out;
  ASSERT_TRUE(head_->Forward({{*seq, Tokens(1, n_), {}, LogitsMode::kAll}}, g, &out).ok());
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(R * V));
  auto e0 = MaxRowRelError(out.logits.data(), Npy("logits0.npy").f32.data(), R, V);
  EXPECT_LE(e0.max_rel, kTolerance) << "logits row " << e0.row;
  auto eh = MaxRowRelError(out.hidden.data(), Npy("hidden0.npy").f32.data(), R, H);
  EXPECT_LE(eh.max_rel, kTolerance) << "hidden row " << eh.row;
}

TEST_P(EagleHeadGoldenTest, TreeNodeFedItsOwnOutputMatchesPyTorch) {
  std::vector<float> g;
  ASSERT_TRUE(head_->Fuse(features_, n_, &g).ok());
  const int64_t H = head_->info().hidden_size, V = head_->info().vocab_size;
  const int64_t a = n_ - 3;  // anchor: row a, then its child at depth 2
  auto seq = head_->sequences()->Open(n_ + 4);
  ASSERT_TRUE(seq.ok());
  ForwardOutput out;
  std::vector<float> prefix(g.begin(), g.begin() + a * H);
  ASSERT_TRUE(head_->Forward({{*seq, Tokens(1, a + 1), {}, LogitsMode::kNone}}, prefix, &out).ok());
  ASSERT_TRUE(head_->sequences()->Commit(*seq, a).ok());
  std::vector<float> h0 = Npy("hidden0.npy").f32;
  std::vector<float> rows(g.begin() + a * H, g.begin() + (a + 1) * H);
  rows.insert(rows.end(), h0.begin() + a * H, h0.begin() + (a + 1) * H);
  ForwardSeq tree{*seq, {tokens_[a + 1], tokens_[a + 2]}, {-1, 0}, LogitsMode::kAll};
  ASSERT_TRUE(head_->Forward({tree}, rows, &out).ok());
  std::vector<float> want = Npy("logits1.npy").f32;
  auto e0 = MaxRowRelError(out.logits.data(), Npy("logits0.npy").f32.data() + a * V, 1, V);
  EXPECT_LE(e0.max_rel, kTolerance) << "root row";
  auto e1 = MaxRowRelError(out.logits.data() + V, want.data() + a * V, 1, V);
  EXPECT_LE(e1.max_rel, kTolerance) << "depth-2 node";
}

TEST(EagleHeadLoadTest, RejectsATargetThatIsNotItsOwn) {
  auto backend = CreateCpuBackend();
  auto head =
      EagleHead::Load(SourceDir() + "/models/demo/eagle-head",
                      SourceDir() + "/models/demo/transformer-drafter", backend.get(), 8, 16);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument) << head.status();
  EXPECT_NE(head.status().message().find("hidden_size"), std::string::npos) << head.status();
}

INSTANTIATE_TEST_SUITE_P(DemoHeads, EagleHeadGoldenTest,
                         ::testing::Values("eagle-head", "eagle3-head"));

}  // namespace
}  // namespace treespec
