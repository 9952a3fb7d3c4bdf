#include "core/spec/token_tree.h"

#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 100;

// root(1) ─┬─ 2 (n1) ─┬─ 4 (n3)
//          │          └─ 5 (n4) ── 7 (n6)
//          └─ 3 (n2) ──── 6 (n5)
TokenTree SampleTree() {
  TokenTree t = TokenTree::Root(1);
  t.AddNode(0, 2);
  t.AddNode(0, 3);
  t.AddNode(1, 4);
  t.AddNode(1, 5);
  t.AddNode(2, 6);
  t.AddNode(4, 7);
  return t;
}

SparseDist Dist(std::vector<int32_t> tokens, std::vector<float> probs) {
  SparseDist d;
  d.tokens = std::move(tokens);
  d.probs = std::move(probs);
  return d;
}

TEST(TokenTreeTest, RootAndChain) {
  TokenTree root = TokenTree::Root(9);
  EXPECT_TRUE(root.Validate(kVocab).ok());
  EXPECT_EQ(root.num_nodes(), 1);
  EXPECT_THAT(root.Children(0), ElementsAre());

  TokenTree chain = TokenTree::Chain(9, {4, 5, 6});
  ASSERT_TRUE(chain.Validate(kVocab).ok());
  EXPECT_THAT(chain.tokens, ElementsAre(9, 4, 5, 6));
  EXPECT_THAT(chain.parents, ElementsAre(-1, 0, 1, 2));
  EXPECT_THAT(chain.Depths(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(chain.PathTo(3), ElementsAre(0, 1, 2, 3));
}

TEST(TokenTreeTest, StructureQueries) {
  const TokenTree t = SampleTree();
  ASSERT_TRUE(t.Validate(kVocab).ok());
  EXPECT_THAT(t.Depths(), ElementsAre(0, 1, 1, 2, 2, 2, 3));
  EXPECT_THAT(t.Children(0), ElementsAre(1, 2));
  EXPECT_THAT(t.Children(1), ElementsAre(3, 4));
  EXPECT_THAT(t.Children(6), ElementsAre());
  const auto lists = t.ChildLists();
  for (int32_t v = 0; v < t.num_nodes(); ++v) {
    EXPECT_EQ(lists[v], t.Children(v)) << "node " << v;
  }
  EXPECT_THAT(t.PathTo(6), ElementsAre(0, 1, 4, 6));
  EXPECT_THAT(t.PathTo(5), ElementsAre(0, 2, 5));
  EXPECT_THAT(t.PathTo(0), ElementsAre(0));
  EXPECT_EQ(t.ChildWithToken(1, 5), 4);
  EXPECT_EQ(t.ChildWithToken(1, 6), -1);
}

TEST(TokenTreeTest, DraftDistributionsAccepted) {
  TokenTree t = SampleTree();
  t.draft.resize(t.num_nodes());
  t.draft[0] = Dist({3, 2, 50}, {0.5f, 0.3f, 0.2f});
  t.draft[1] = Dist({4, 5}, {0.6f, 0.4f});
  // node 2 left without q: drafted deterministically.
  EXPECT_TRUE(t.Validate(kVocab).ok()) << t.Validate(kVocab);
  EXPECT_TRUE(t.has_draft(0));
  EXPECT_FALSE(t.has_draft(2));
  t.AddNode(6, 8);
  EXPECT_EQ(t.draft.size(), t.tokens.size());
}

struct BadTree {
  std::string name;
  TokenTree tree;
  std::string message;  // expected substring
};

std::vector<BadTree> BadTrees() {
  std::vector<BadTree> cases;
  auto add = [&](std::string name, TokenTree t, std::string msg) {
    cases.push_back({std::move(name), std::move(t), std::move(msg)});
  };
  add("empty", TokenTree{}, "tokens is empty");
  {
    TokenTree t = SampleTree();
    t.parents.pop_back();
    add("parents_size", t, "parents has 6 entries");
  }
  {
    TokenTree t = SampleTree();
    t.parents[0] = 0;
    add("root_parent", t, "parents[0] = 0");
  }
  {
    TokenTree t = SampleTree();
    t.parents[3] = 3;
    add("self_parent", t, "parents[3] = 3");
  }
  {
    TokenTree t = SampleTree();
    t.parents[2] = 5;
    add("forward_parent", t, "parents[2] = 5");
  }
  {
    TokenTree t = SampleTree();
    t.parents[4] = -1;
    add("second_root", t, "parents[4] = -1");
  }
  {
    TokenTree t = SampleTree();
    t.tokens[5] = kVocab;
    add("token_too_big", t, "tokens[5] = 100 is outside [0, 100)");
  }
  {
    TokenTree t = SampleTree();
    t.tokens[0] = -3;
    add("negative_root_token", t, "tokens[0] = -3");
  }
  {
    TokenTree t = SampleTree();
    t.tokens[4] = 4;  // sibling of node 3, which is also 4
    add("duplicate_siblings", t, "node 1 has two children with token 4");
  }
  {
    TokenTree t = TokenTree::Chain(0, std::vector<int32_t>(kMaxTreeNodes, 1));
    add("too_many_nodes", t, "1025 nodes");
  }
  {
    TokenTree t = TokenTree::Chain(0, std::vector<int32_t>(kMaxTreeDepth + 1, 1));
    add("too_deep", t, "depth 65");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(3);
    add("draft_size", t, "draft has 3 entries");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 3}, {0.5f, 0.3f});
    add("q_sum", t, "draft[0].probs sum to 0.8");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 3, 9}, {0.7f, 0.5f, -0.2f});
    add("q_negative", t, "draft[0].probs[2] = -0.2");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[1] = Dist({4, 5}, {1.0f});
    add("q_lengths", t, "draft[1]: tokens has 2 entries but probs has 1");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 3, 3}, {0.4f, 0.3f, 0.3f});
    add("q_repeat", t, "draft[0].tokens repeats token 3");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 300}, {0.5f, 0.5f});
    add("q_token_range", t, "draft[0].tokens[1] = 300");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 8}, {0.5f, 0.5f});
    add("child_not_in_q", t, "tokens[2] = 3 has probability 0 in draft[0]");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 3}, {1.0f, 0.0f});
    add("child_q_zero", t, "tokens[2] = 3 has probability 0");
  }
  {
    TokenTree t = SampleTree();
    t.draft.resize(t.num_nodes());
    t.draft[0] = Dist({2, 3}, {std::numeric_limits<float>::quiet_NaN(), 1.0f});
    add("q_nan", t, "draft[0].probs[0] = nan");
  }
  return cases;
}

TEST(TokenTreeTest, ValidateRejectsBadTrees) {
  const std::vector<BadTree> cases = BadTrees();
  EXPECT_GE(cases.size(), 15u);
  for (const BadTree& c : cases) {
    absl::Status s = c.tree.Validate(kVocab);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(TokenTreeTest, LimitsAreInclusive) {
  EXPECT_TRUE(TokenTree::Chain(0, std::vector<int32_t>(kMaxTreeDepth, 1)).Validate(kVocab).ok());
  TokenTree wide = TokenTree::Root(0);
  for (int32_t i = 1; i < kMaxTreeNodes; ++i) wide.AddNode(i <= 50 ? 0 : i - 50, i % kVocab);
  EXPECT_EQ(wide.num_nodes(), kMaxTreeNodes);
  EXPECT_TRUE(wide.Validate(kVocab).ok()) << wide.Validate(kVocab);
}

}  // namespace
}  // namespace treespec
