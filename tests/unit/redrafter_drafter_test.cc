// RedrafterDrafter (drafter_service/redrafter_drafter.h) on the demo head:
// the beam fit to a tree shape, the packed trees (valid, rooted at the new
// token, within the shape, no q whatever the temperature), batching
// independence, and the request checks.
#include "drafter_service/redrafter_drafter.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/backend.h"
#include "drafter_service/draft_profiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

TreeShape Shape(const char* text) { return *TreeShape::Parse(text); }

TEST(RedrafterFitBeamsTest, ShapeCapsWidthAndLength) {
  using P = std::pair<int32_t, int32_t>;
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("chain:4"), 3, 4), P(1, 4));
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("3,2,2,1"), 3, 4), P(3, 4));  // 33 nodes
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("2"), 3, 4), P(2, 1));
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("3,3"), 3, 4), P(3, 2));
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("2,2,2,2"), 8, 4), P(7, 4));  // 30 nodes / 4
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("chain:8"), 3, 4), P(2, 4));  // 8 nodes / 4
  EXPECT_EQ(RedrafterDrafter::FitBeams(Shape("chain:2"), 3, 4), P(1, 2));
}

class RedrafterDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    auto d = RedrafterDrafter::Create(Options(), backend_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    drafter_ = std::move(*d);
  }
  static DrafterOptions Options() {
    DrafterOptions o;
    o.kind = "redrafter";
    o.model_dir = testing::SourceDir() + "/models/demo/redrafter-head";
    o.target_dir = testing::SourceDir() + "/models/demo/target";
    o.max_sequences = 8;
    return o;
  }
  // Deterministic feature rows of the target's width.
  static std::vector<float> Features(int64_t rows, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> f(rows * kH);
    for (float& x : f) x = u(rng);
    return f;
  }
  void Open(uint64_t id, std::vector<int32_t> prompt) {
    DrafterOpenSpec spec{id, prompt, Features(static_cast<int64_t>(prompt.size()) - 1, id)};
    ASSERT_TRUE(drafter_->Open({spec})[0].ok());
  }
  static DraftSpec Spec(uint64_t id, uint64_t step, std::vector<int32_t> toks, const char* shape) {
    DraftSpec s;
    s.id = id;
    s.step = step;
    s.new_tokens = toks;
    s.shape = Shape(shape);
    s.features = Features(static_cast<int64_t>(toks.size()), 100 + id * 10 + step);
    return s;
  }

  static constexpr int64_t kH = 256;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RedrafterDrafter> drafter_;
};

TEST_F(RedrafterDrafterTest, ReadsTheTargetsLastLayer) {
  EXPECT_EQ(drafter_->kind(), "redrafter");
  EXPECT_EQ(drafter_->vocab_size(), 2048);
  EXPECT_EQ(drafter_->feature_layers(), std::vector<int32_t>{7});
}

TEST_F(RedrafterDrafterTest, TreeIsThePackedBeamWithinTheShape) {
  Open(1, {1, 362, 363, 261});
  for (const char* shape : {"3,2,2,1", "chain:4", "3,3"}) {
    SCOPED_TRACE(shape);
    const uint64_t step = std::string(shape) == "3,2,2,1" ? 1 : std::string(shape) == "chain:4" ? 2 : 3;
    auto out = drafter_->Draft({Spec(1, step, {350, 1985}, shape)});
    ASSERT_TRUE(out[0].status.ok()) << out[0].status;
    const TokenTree& t = out[0].tree;
    ASSERT_TRUE(t.Validate(2048).ok()) << t.Validate(2048);
    EXPECT_EQ(t.tokens[0], 1985);
    EXPECT_TRUE(t.draft.empty());
    const auto [w, l] = RedrafterDrafter::FitBeams(Shape(shape), 3, 4);
    EXPECT_LE(t.num_nodes(), 1 + w * l);
    EXPECT_LE(t.num_nodes(), Shape(shape).NumNodes());
    const std::vector<int32_t> depth = t.Depths();
    EXPECT_EQ(*std::max_element(depth.begin(), depth.end()), l);
    // Exactly w leaves at depth l: the w distinct candidates.
    int leaves = 0;
    for (int32_t v = 0; v < t.num_nodes(); ++v) leaves += depth[v] == l;
    EXPECT_EQ(leaves, w);
  }
}

TEST_F(RedrafterDrafterTest, SampledRequestsGetNoQ) {
  Open(1, {1, 362});
  DraftSpec s = Spec(1, 1, {363}, "3,2,2,1");
  s.temperature = 1.0f;
  s.seed = 5;
  auto out = drafter_->Draft({s});
  ASSERT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_TRUE(out[0].tree.draft.empty());
  EXPECT_GT(out[0].tree.num_nodes(), 5);
}

TEST_F(RedrafterDrafterTest, BatchedDraftsEqualSingleDrafts) {
  Open(1, {1, 362, 363});
  Open(2, {1, 500});
  Open(3, {1, 700, 701, 702});
  auto batched = drafter_->Draft({Spec(1, 1, {261}, "3,2,2,1"), Spec(2, 1, {9, 10}, "chain:3"),
                                  Spec(3, 1, {42}, "2,2")});
  auto d2 = RedrafterDrafter::Create(Options(), backend_.get());
  ASSERT_TRUE(d2.ok());
  const std::vector<std::pair<uint64_t, std::vector<int32_t>>> opens = {
      {1, {1, 362, 363}}, {2, {1, 500}}, {3, {1, 700, 701, 702}}};
  for (const auto& [id, prompt] : opens) {
    DrafterOpenSpec spec{id, prompt, Features(static_cast<int64_t>(prompt.size()) - 1, id)};
    ASSERT_TRUE((*d2)->Open({spec})[0].ok());
  }
  const std::vector<DraftSpec> singles = {Spec(1, 1, {261}, "3,2,2,1"), Spec(2, 1, {9, 10}, "chain:3"),
                                          Spec(3, 1, {42}, "2,2")};
  for (size_t i = 0; i < singles.size(); ++i) {
    auto one = (*d2)->Draft({singles[i]});
    ASSERT_TRUE(batched[i].status.ok()) << batched[i].status;
    ASSERT_TRUE(one[0].status.ok()) << one[0].status;
    EXPECT_EQ(batched[i].tree.tokens, one[0].tree.tokens) << "sequence " << singles[i].id;
    EXPECT_EQ(batched[i].tree.parents, one[0].tree.parents) << "sequence " << singles[i].id;
  }
}

TEST_F(RedrafterDrafterTest, BadRequestsNameTheField) {
  DrafterOpenSpec bad{1, {1, 2, 3}, Features(1, 1)};
  absl::Status st = drafter_->Open({bad})[0];
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("features"));
  Open(1, {1, 2, 3});
  DraftSpec s = Spec(1, 1, {4, 5}, "3,2,2,1");
  s.features.resize(kH);
  auto out = drafter_->Draft({s});
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[0].status.message(), HasSubstr("features"));
  // The failed request changed nothing: step 1 is still next.
  out = drafter_->Draft({Spec(1, 1, {4, 5}, "3,2,2,1")});
  EXPECT_TRUE(out[0].status.ok()) << out[0].status;
  out = drafter_->Draft({Spec(1, 1, {4, 5}, "3,2,2,1")});
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kAborted);
  out = drafter_->Draft({Spec(9, 1, {4}, "3")});
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(drafter_->Release({1, 9}), 1);
}

TEST(RedrafterDrafterOptionsTest, RejectsBadBeamsAndMissingTarget) {
  DrafterOptions o;
  o.kind = "redrafter";
  o.model_dir = "x";
  EXPECT_THAT(o.Validate().message(), HasSubstr("--target is required"));
  o.target_dir = "y";
  o.beam_width = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--beam-width 0"));
  o.beam_width = 3;
  o.beam_length = 17;
  EXPECT_THAT(o.Validate().message(), HasSubstr("--beam-length 17"));
}

// The start-up draft-cost profile (drafter_main) opens and drafts throw-away
// sequences; drafters reading the target's features get constant features of
// their feature_width() and are profiled like the others.
TEST(FeatureDrafterProfileTest, EagleAndRedrafterHeadsCanBeProfiled) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  for (const char* kind : {"redrafter", "eagle", "eagle3"}) {
    DrafterOptions o;
    o.kind = kind;
    o.model_dir = testing::SourceDir() + "/models/demo/" + kind + "-head";
    o.target_dir = testing::SourceDir() + "/models/demo/target";
    o.max_sequences = 4;
    auto d = CreateDrafter(o, backend.get());
    ASSERT_TRUE(d.ok()) << kind << ": " << d.status();
    EXPECT_EQ((*d)->feature_width(),
              static_cast<int64_t>((*d)->feature_layers().size()) * 256) << kind;
    DraftProfileOptions po;
    po.batches = {1, 4};
    po.depths = {1, 3};
    po.repeats = 1;
    auto samples = ProfileDraftCalls(d->get(), o.max_sequences, o.max_tree_nodes, po);
    ASSERT_TRUE(samples.ok()) << kind << ": " << samples.status();
    EXPECT_FALSE(samples->empty()) << kind;
    EXPECT_EQ((*d)->Stats().num_sequences, 0) << kind << ": profile sequences released";
  }
}

}  // namespace
}  // namespace treespec
