// EAGLE heads through the real services on loopback: the demo target
// (models/demo/target) as the worker, its EAGLE and EAGLE-3 heads
// (models/demo/eagle-head, eagle3-head) as drafters reading the target's
// features from the wire (worker Open / Verify -> coordinator -> drafter
// Open / Draft). Greedy speculative output equals plain greedy output for
// both kinds, every tree shape of the services tests, alone and with 8
// concurrent requests; the heads' drafts are accepted (they are trained).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

constexpr int kMaxTokens = 48;
constexpr int kConcurrentMaxTokens = 40;
constexpr int kConcurrency = 8;

const std::vector<std::string> kTrees = {"chain:4", "3,2,2,1,1", "3,3,2,1",
                                         "2,2,2,2", "4,2,1",     "auto"};

std::string Demo(const std::string& name) { return SourceDir() + "/models/demo/" + name; }

// Story-like prompts in the demo vocabulary: BOS then a few ids.
std::vector<int32_t> PromptFor(int i) {
  std::vector<int32_t> p = {1};
  for (int32_t t : TestPrompt(i, 4 + i % 5)) p.push_back(300 + t);
  return p;
}

class EagleEquivalenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.worker.model = Demo("target");
    config.mamba = config.self = config.garbage = config.ngram = false;
    for (const char* kind : {"eagle", "eagle3"}) {
      DrafterConfig dc;
      dc.kind = kind;
      dc.model = Demo(std::string(kind) + "-head");
      dc.target = Demo("target");
      config.extra_drafters.push_back({kind, dc});
    }
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static const std::vector<int32_t>& Plain(int i, int max_tokens) {
    auto key = std::make_pair(i, max_tokens);
    auto it = plain_.find(key);
    if (it != plain_.end()) return it->second;
    GenerateResult r = cluster_->Generate(MakeRequest(PromptFor(i), max_tokens, "none"));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids.size(), static_cast<size_t>(max_tokens));
    return plain_[key] = r.ids;
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

  static Cluster* cluster_;
  static std::map<std::pair<int, int>, std::vector<int32_t>> plain_;
};

Cluster* EagleEquivalenceTest::cluster_ = nullptr;
std::map<std::pair<int, int>, std::vector<int32_t>> EagleEquivalenceTest::plain_;

struct Case {
  std::string drafter;
  std::string tree;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.drafter << " " << c.tree; }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string tree = info.param.tree;
  std::replace(tree.begin(), tree.end(), ',', '_');
  std::replace(tree.begin(), tree.end(), ':', '_');
  return info.param.drafter + "_" + tree;
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const char* d : {"eagle", "eagle3"}) {
    for (const std::string& t : kTrees) out.push_back({d, t});
  }
  return out;
}

class EagleByShape : public EagleEquivalenceTest, public ::testing::WithParamInterface<Case> {};

TEST_P(EagleByShape, SingleRequestEqualsPlainGreedy) {
  const Case& c = GetParam();
  for (int i : {0, 1}) {
    GenerateResult r = cluster_->Generate(MakeRequest(PromptFor(i), kMaxTokens, c.drafter, c.tree));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids, Plain(i, kMaxTokens)) << c.drafter << " tree " << c.tree << " prompt " << i;
    CheckStats(r, c.drafter, kMaxTokens, c.drafter + " " + c.tree, c.tree == "auto");
  }
}

TEST_P(EagleByShape, EightConcurrentRequestsEqualPlainGreedy) {
  const Case& c = GetParam();
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < kConcurrency; ++i) {
    reqs.push_back(MakeRequest(PromptFor(i), kConcurrentMaxTokens, c.drafter, c.tree));
  }
  std::vector<GenerateResult> rs = RunConcurrently(cluster_->stub(), reqs);
  for (int i = 0; i < kConcurrency; ++i) {
    ASSERT_TRUE(rs[i].status.ok()) << "request " << i << ": " << rs[i].status.error_message();
    EXPECT_EQ(rs[i].ids, Plain(i, kConcurrentMaxTokens))
        << c.drafter << " tree " << c.tree << " request " << i;
    CheckStats(rs[i], c.drafter, kConcurrentMaxTokens,
               c.drafter + " " + c.tree + " request " + std::to_string(i), c.tree == "auto");
  }
}

// Requests without the features the head reads fail per sequence with
// INVALID_ARGUMENT naming the field, and leave the sequence usable.
TEST_F(EagleEquivalenceTest, MissingFeaturesAreRejectedByField) {
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

INSTANTIATE_TEST_SUITE_P(HeadsAndTrees, EagleByShape, ::testing::ValuesIn(AllCases()), CaseName);

}  // namespace
}  // namespace treespec::testing
