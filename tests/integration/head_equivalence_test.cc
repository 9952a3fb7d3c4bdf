// The drafter heads that read the target's features, through the real
// services on loopback: the demo target (models/demo/target) as the worker,
// its EAGLE and EAGLE-3 heads (models/demo/eagle-head, eagle3-head) and its
// ReDrafter head (models/demo/redrafter-head) with two beam settings (the
// default 3 x 4 and a wider, longer 6 x 5) as drafters reading the target's
// features from the wire (worker Open / Verify -> coordinator -> drafter
// Open / Draft). Greedy speculative output equals plain greedy output for
// every head and tree shape below (ReDrafter's shapes cap its beams: chain:4
// is a width-1 beam), alone and with 8 concurrent requests; the heads' drafts
// are accepted (they are trained). TP 2 is tests/integration/tp_test.cc.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/integration/greedy_equivalence.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

struct Head {
  std::string name, kind, dir;
  std::vector<std::string> trees;
  int beam_width = 3, beam_length = 4;  // ReDrafter only (the drafter's defaults)
};
const std::vector<std::string> kEagleTrees = {"chain:4", "3,2,2,1,1", "3,3,2,1",
                                              "2,2,2,2", "4,2,1",     "auto"};
const std::vector<std::string> kBeamTrees = {"chain:4", "3,2,2,1", "4,2,2,1,1", "auto"};
const std::vector<Head> kHeads = {
    {"eagle", "eagle", "eagle-head", kEagleTrees},
    {"eagle3", "eagle3", "eagle3-head", kEagleTrees},
    {"redrafter", "redrafter", "redrafter-head", kBeamTrees},
    {"redrafter-wide", "redrafter", "redrafter-head", kBeamTrees, 6, 5},
};

std::string Demo(const std::string& name) { return SourceDir() + "/models/demo/" + name; }

class HeadEquivalenceTest : public GreedyEquivalenceSuite<HeadEquivalenceTest> {
 public:
  // Story-like prompts in the demo vocabulary: BOS then a few ids.
  static std::vector<int32_t> PromptFor(int i) {
    std::vector<int32_t> p = {1};
    for (int32_t t : TestPrompt(i, 4 + i % 5)) p.push_back(300 + t);
    return p;
  }

  static void CheckStats(const GenerateResult& r, const std::string& drafter, int max_tokens,
                         const std::string& what, bool is_auto) {
    ASSERT_TRUE(r.has_final) << what;
    const v1::SpeculationStats& s = r.final_chunk.speculation();
    EXPECT_EQ(s.drafter(), drafter) << what;
    EXPECT_EQ(s.fallback_steps(), 0) << what << " " << s.ShortDebugString();
    if (!is_auto) {
      EXPECT_GT(s.drafted_tokens(), 0) << what << " " << s.ShortDebugString();
      EXPECT_GT(s.accepted_tokens(), 0) << what << " " << s.ShortDebugString();
    }
    EXPECT_EQ(s.accepted_tokens() + s.steps(), max_tokens - 1) << what;
  }

 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.worker.model = Demo("target");
    config.mamba = config.self = config.garbage = config.ngram = false;
    for (const Head& h : kHeads) {
      DrafterConfig dc;
      dc.kind = h.kind;
      dc.model = Demo(h.dir);
      dc.target = Demo("target");
      dc.beam_width = h.beam_width;
      dc.beam_length = h.beam_length;
      config.extra_drafters.push_back({h.name, dc});
    }
    UseCluster(Cluster::Start(config));
  }
};

std::vector<ShapeCase> AllCases() {
  std::vector<ShapeCase> out;
  for (const Head& h : kHeads) {
    for (const std::string& t : h.trees) out.push_back({h.name, t});
  }
  return out;
}

class HeadByShape : public HeadEquivalenceTest,
                    public ::testing::WithParamInterface<ShapeCase> {};

TEST_P(HeadByShape, SingleRequestEqualsPlainGreedy) { AloneEqualsPlain(GetParam()); }

TEST_P(HeadByShape, EightConcurrentRequestsEqualPlainGreedy) { ConcurrentEqualsPlain(GetParam()); }

// Requests without the features the head reads fail per sequence with
// INVALID_ARGUMENT naming the field, and leave the sequence usable.
TEST_F(HeadEquivalenceTest, MissingFeaturesAreRejectedByField) {
  Drafter* d = cluster_->drafter("eagle")->drafter();
  ASSERT_EQ(d->feature_layers(), std::vector<int32_t>{7});
  std::vector<absl::Status> open = d->Open({{991, {1, 300, 301}, {}}});
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].code(), absl::StatusCode::kInvalidArgument) << open[0];
  EXPECT_NE(open[0].message().find("features"), std::string::npos) << open[0];
  const int64_t W = 256;
  open = d->Open({{992, {1, 300, 301}, std::vector<float>(2 * W, 0.5f)}});
  ASSERT_TRUE(open[0].ok()) << open[0];
  DraftSpec spec;
  spec.id = 992;
  spec.step = 1;
  spec.new_tokens = {302};
  spec.shape = *TreeShape::Parse("chain:3");
  std::vector<DraftOutcome> out = d->Draft({spec});
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kInvalidArgument) << out[0].status;
  spec.features.assign(W, 0.25f);
  out = d->Draft({spec});
  ASSERT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_EQ(out[0].tree.num_nodes(), 4);
  EXPECT_EQ(d->Release({991, 992}), 1);
}

// The drafter asks the worker for the target's last layer, and the trees it
// answers through the services are packed beams: no q, within the shape.
TEST_F(HeadEquivalenceTest, AsksForTheLastLayerAndAnswersPackedBeams) {
  Drafter* d = cluster_->drafter("redrafter-wide")->drafter();
  ASSERT_EQ(d->feature_layers(), std::vector<int32_t>{7});
  const int64_t H = 256;
  ASSERT_TRUE(d->Open({{993, {1, 300, 301}, std::vector<float>(2 * H, 0.5f)}})[0].ok());
  DraftSpec spec;
  spec.id = 993;
  spec.step = 1;
  spec.new_tokens = {302};
  spec.shape = *TreeShape::Parse("4,2,2,1,1");  // 48 nodes: width min(6, 48 / 5) = 6, length 5
  spec.features.assign(H, 0.25f);
  std::vector<DraftOutcome> out = d->Draft({spec});
  ASSERT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_TRUE(out[0].tree.draft.empty());
  EXPECT_LE(out[0].tree.num_nodes(), 1 + 6 * 5);
  const std::vector<int32_t> depth = out[0].tree.Depths();
  EXPECT_EQ(*std::max_element(depth.begin(), depth.end()), 5);
  EXPECT_EQ(d->Release({993}), 1);
}

INSTANTIATE_TEST_SUITE_P(HeadsAndTrees, HeadByShape, ::testing::ValuesIn(AllCases()), ShapeCaseName);

}  // namespace
}  // namespace treespec::testing
