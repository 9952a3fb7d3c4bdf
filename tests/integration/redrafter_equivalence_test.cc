// ReDrafter through the real services on loopback: the demo target
// (models/demo/target) as the worker and its ReDrafter head
// (models/demo/redrafter-head) as two drafters with different beam settings
// (the default 3 x 4 and a wider, longer 6 x 5), reading the target's last
// layer from the wire. Greedy speculative output equals plain greedy output
// for both settings and every tree shape below (which cap the beams:
// chain:4 is a width-1 beam, auto lets the planner pick), alone and with 8
// concurrent requests; the head's drafts are accepted (it is trained).
// TP 2 is tests/integration/tp_test.cc's GreedyEagleSpeculativeEqualsPlainGreedy.
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

const std::vector<std::string> kTrees = {"chain:4", "3,2,2,1", "4,2,2,1,1", "auto"};
const std::vector<std::string> kDrafters = {"redrafter", "redrafter-wide"};

std::string Demo(const std::string& name) { return SourceDir() + "/models/demo/" + name; }

std::vector<int32_t> PromptFor(int i) {
  std::vector<int32_t> p = {1};
  for (int32_t t : TestPrompt(i, 4 + i % 5)) p.push_back(300 + t);
  return p;
}

class RedrafterEquivalenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.worker.model = Demo("target");
    config.mamba = config.self = config.garbage = config.ngram = false;
    for (const std::string& name : kDrafters) {
      DrafterConfig dc;
      dc.kind = "redrafter";
      dc.model = Demo("redrafter-head");
      dc.target = Demo("target");
      if (name == "redrafter-wide") {
        dc.beam_width = 6;
        dc.beam_length = 5;
      }
      config.extra_drafters.push_back({name, dc});
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

Cluster* RedrafterEquivalenceTest::cluster_ = nullptr;
std::map<std::pair<int, int>, std::vector<int32_t>> RedrafterEquivalenceTest::plain_;

struct Case {
  std::string drafter;
  std::string tree;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.drafter << " " << c.tree; }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.drafter + "_" + info.param.tree;
  for (char& ch : name) {
    if (ch == ',' || ch == ':' || ch == '-') ch = '_';
  }
  return name;
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const std::string& d : kDrafters) {
    for (const std::string& t : kTrees) out.push_back({d, t});
  }
  return out;
}

class RedrafterByShape : public RedrafterEquivalenceTest,
                         public ::testing::WithParamInterface<Case> {};

TEST_P(RedrafterByShape, SingleRequestEqualsPlainGreedy) {
  const Case& c = GetParam();
  for (int i : {0, 1}) {
    GenerateResult r = cluster_->Generate(MakeRequest(PromptFor(i), kMaxTokens, c.drafter, c.tree));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids, Plain(i, kMaxTokens)) << c.drafter << " tree " << c.tree << " prompt " << i;
    CheckStats(r, c.drafter, kMaxTokens, c.drafter + " " + c.tree, c.tree == "auto");
  }
}

TEST_P(RedrafterByShape, EightConcurrentRequestsEqualPlainGreedy) {
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

// The drafter asks the worker for the target's last layer, and the trees it
// answers through the services are packed beams: no q, within the shape.
TEST_F(RedrafterEquivalenceTest, AsksForTheLastLayerAndAnswersPackedBeams) {
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

INSTANTIATE_TEST_SUITE_P(BeamsAndTrees, RedrafterByShape, ::testing::ValuesIn(AllCases()),
                         CaseName);

}  // namespace
}  // namespace treespec::testing
