// treespec's ReDrafter head (core/model/redrafter_head.h) and beam search
// (drafter_service/redrafter_beam_search.h) on the demo target against the
// PyTorch reference (tools/train/redrafter.py) through the goldens of
// tools/goldens/make_redrafter_goldens.py (tests/golden/data/redrafter/):
// the engine's last-layer features equal PyTorch's, the head's context (the
// target's final norm), its step-1 and step-2 logits along the sequence, and
// whole beam searches (candidates and per-step log-probabilities).
//
// Tolerance: golden_data.h's row error <= 1e-4 (float32 on both sides).
#include <memory>
#include <string>
#include <vector>

#include "core/model/llama.h"
#include "core/model/redrafter_head.h"
#include "core/util/npy.h"
#include "drafter_service/redrafter_beam_search.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"

namespace treespec {
namespace {

using ::treespec::testing::MaxRowRelError;
using ::treespec::testing::SourceDir;

constexpr double kTolerance = 1e-4;

class RedrafterHeadGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gdir_ = SourceDir() + "/tests/golden/data/redrafter/redrafter-head";
    backend_ = CreateCpuBackend();
    auto head = RedrafterHead::Load(SourceDir() + "/models/demo/redrafter-head",
                                    SourceDir() + "/models/demo/target", backend_.get());
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
  std::vector<float> Rows(const std::vector<float>& x, int64_t begin, int64_t end) const {
    const int64_t H = head_->info().hidden_size;
    return std::vector<float>(x.begin() + begin * H, x.begin() + end * H);
  }

  std::string gdir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RedrafterHead> head_;
  std::vector<int32_t> tokens_;
  std::vector<float> features_;
  int64_t n_ = 0;
};

TEST_F(RedrafterHeadGoldenTest, EngineFeaturesMatchPyTorch) {
  auto target = LlamaModel::Load(SourceDir() + "/models/demo/target", backend_.get());
  ASSERT_TRUE(target.ok()) << target.status();
  auto cache = PagedKvCache::Create((*target)->KvOptions(16, 16), backend_.get());
  ASSERT_TRUE(cache.ok());
  const int64_t seq = (*cache)->CreateSequence();
  ASSERT_TRUE((*cache)->Reserve(seq, n_).ok());
  ForwardOptions options;
  options.hidden_layers = {head_->info().target_layer};
  ForwardOutput out;
  ForwardSeq fs{seq, tokens_, {}, LogitsMode::kAll};
  ASSERT_TRUE((*target)->Forward({fs}, cache->get(), &out, options).ok());
  const int64_t H = head_->info().hidden_size;
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(n_ * H));
  auto err = MaxRowRelError(out.hidden.data(), features_.data(), n_, H);
  EXPECT_LE(err.max_rel, kTolerance) << "row " << err.row;
}

TEST_F(RedrafterHeadGoldenTest, ContextAndStepLogitsMatchPyTorch) {
  const int64_t V = head_->info().vocab_size;
  std::vector<float> h;
  ASSERT_TRUE(head_->Context(features_, n_, &h).ok());
  auto ec = MaxRowRelError(h.data(), Npy("context.npy").f32.data(), n_, head_->info().hidden_size);
  EXPECT_LE(ec.max_rel, kTolerance) << "context row " << ec.row;

  // Step 1 of row t: root tokens[t+1], context t (rows 0..N-3).
  const int64_t r1 = n_ - 2;
  std::vector<float> s, logits;
  ASSERT_TRUE(head_->InitState(Tokens(1, r1 + 1), &s).ok());
  ASSERT_TRUE(head_->Logits(s, Rows(h, 0, r1), &logits).ok());
  auto e1 = MaxRowRelError(logits.data(), Npy("logits1.npy").f32.data(), r1, V);
  EXPECT_LE(e1.max_rel, kTolerance) << "step-1 row " << e1.row;

  // Step 2: the RNN fed tokens[t+2] (rows 0..N-4).
  const int64_t r2 = n_ - 3;
  s.resize(r2 * head_->info().hidden_size);
  ASSERT_TRUE(head_->Step(s, Tokens(2, r2 + 2), &s).ok());
  ASSERT_TRUE(head_->Logits(s, Rows(h, 0, r2), &logits).ok());
  auto e2 = MaxRowRelError(logits.data(), Npy("logits2.npy").f32.data(), r2, V);
  EXPECT_LE(e2.max_rel, kTolerance) << "step-2 row " << e2.row;
}

TEST_F(RedrafterHeadGoldenTest, BatchedBeamSearchMatchesPyTorch) {
  const std::vector<int32_t> anchors = Npy("beam_anchors.npy").i32;
  const std::vector<int32_t> want = Npy("beam_tokens.npy").i32;
  const std::vector<float> want_lp = Npy("beam_logprobs.npy").f32;
  const int32_t W = 3, L = 4;
  ASSERT_EQ(want.size(), anchors.size() * W * L);
  std::vector<float> h;
  ASSERT_TRUE(head_->Context(features_, n_, &h).ok());
  const int64_t H = head_->info().hidden_size;
  // All anchors in one batched search, plus a width-1 request in between
  // whose answer must be the greedy chain of the first anchor.
  std::vector<BeamRequest> req;
  for (int32_t t : anchors) req.push_back({tokens_[t + 1], h.data() + t * H, W, L});
  req.insert(req.begin() + 1, BeamRequest{tokens_[anchors[0] + 1], h.data() + anchors[0] * H, 1, 2});
  auto beams = RedrafterBeamSearch(head_.get(), req);
  ASSERT_TRUE(beams.ok()) << beams.status();
  for (size_t a = 0; a < anchors.size(); ++a) {
    const Beams& b = (*beams)[a == 0 ? 0 : a + 1];
    ASSERT_EQ(b.width, W);
    ASSERT_EQ(b.length, L);
    for (int32_t i = 0; i < W * L; ++i) {
      EXPECT_EQ(b.tokens[i], want[a * W * L + i]) << "anchor " << anchors[a] << " entry " << i;
      EXPECT_NEAR(b.log_probs[i], want_lp[a * W * L + i], 1e-4)
          << "anchor " << anchors[a] << " entry " << i;
    }
  }
  const Beams& chain = (*beams)[1];
  ASSERT_EQ(chain.width, 1);
  ASSERT_EQ(chain.length, 2);
  std::vector<float> s, logits;
  ASSERT_TRUE(head_->InitState({tokens_[anchors[0] + 1]}, &s).ok());
  std::vector<float> h0(h.begin() + anchors[0] * H, h.begin() + (anchors[0] + 1) * H);
  ASSERT_TRUE(head_->Logits(s, h0, &logits).ok());
  const int64_t V = head_->info().vocab_size;
  EXPECT_EQ(chain.tokens[0], std::max_element(logits.begin(), logits.end()) - logits.begin());
  ASSERT_TRUE(head_->Step(s, {chain.tokens[0]}, &s).ok());
  ASSERT_TRUE(head_->Logits(s, h0, &logits).ok());
  EXPECT_EQ(chain.tokens[1], std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
}

TEST(RedrafterHeadLoadTest, RejectsATargetThatIsNotItsOwn) {
  auto backend = CreateCpuBackend();
  auto head = RedrafterHead::Load(SourceDir() + "/models/demo/redrafter-head",
                                  SourceDir() + "/models/demo/transformer-drafter", backend.get());
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument) << head.status();
  EXPECT_NE(head.status().message().find("hidden_size"), std::string::npos) << head.status();
}

TEST(RedrafterHeadLoadTest, RejectsAnEagleHead) {
  auto backend = CreateCpuBackend();
  auto head = RedrafterHead::Load(SourceDir() + "/models/demo/eagle-head",
                                  SourceDir() + "/models/demo/target", backend.get());
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument) << head.status();
  EXPECT_NE(head.status().message().find("model_type"), std::string::npos) << head.status();
}

}  // namespace
}  // namespace treespec
