#include "core/spec/beam_tree.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Beams Make(int32_t width, int32_t length, std::vector<int32_t> tokens,
           std::vector<float> log_probs = {}) {
  Beams b;
  b.width = width;
  b.length = length;
  b.tokens = std::move(tokens);
  b.log_probs = std::move(log_probs);
  return b;
}

// Each candidate's tree path must spell the candidate, whatever was merged.
void ExpectPathsSpellBeams(const PackedBeams& p, const Beams& b) {
  ASSERT_TRUE(p.tree.Validate(1000).ok()) << p.tree.Validate(1000);
  for (int32_t i = 0; i < b.width; ++i) {
    const int32_t leaf = p.beam_nodes[i * b.length + b.length - 1];
    const std::vector<int32_t> path = p.tree.PathTo(leaf);
    ASSERT_EQ(path.size(), static_cast<size_t>(b.length + 1)) << "candidate " << i;
    for (int32_t j = 0; j < b.length; ++j) {
      EXPECT_EQ(p.tree.tokens[path[j + 1]], b.tokens[i * b.length + j])
          << "candidate " << i << " token " << j;
      EXPECT_EQ(path[j + 1], p.beam_nodes[i * b.length + j]) << "candidate " << i << " token " << j;
    }
  }
}

TEST(DedupPrefixTest, PaperExample) {
  // App. A.1's docstring example.
  const Beams b = Make(3, 4, {91, 92, 93, 95, 91, 92, 94, 96, 91, 92, 93, 97});
  EXPECT_THAT(DedupPrefix(b), ElementsAre(0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 2));
}

TEST(DedupPrefixTest, PrefixMustMatchFromTheStart) {
  // Candidate 1 equals candidate 0 at positions 1 and 2 but not at 0: no share.
  const Beams b = Make(2, 3, {5, 6, 7, 4, 6, 7});
  EXPECT_THAT(DedupPrefix(b), ElementsAre(0, 0, 0, 1, 1, 1));
}

TEST(PackBeamsTest, PaperExampleMergesSharedPrefix) {
  const Beams b = Make(3, 4, {91, 92, 93, 95, 91, 92, 94, 96, 91, 92, 93, 97});
  auto p = PackBeams(7, b);
  ASSERT_TRUE(p.ok()) << p.status();
  // root, 91, 92, then level 3: 93 (c0), 94 (c1); level 4: 95, 96, 97.
  EXPECT_THAT(p->tree.tokens, ElementsAre(7, 91, 92, 93, 94, 95, 96, 97));
  EXPECT_THAT(p->tree.parents, ElementsAre(-1, 0, 1, 2, 2, 3, 4, 3));
  ExpectPathsSpellBeams(*p, b);
}

TEST(PackBeamsTest, DuplicateCandidatesBecomeOnePath) {
  const Beams b = Make(3, 3, {1, 2, 3, 1, 2, 3, 1, 2, 3}, {-0.1f, -0.2f, -0.3f, -0.1f, -0.2f,
                                                             -0.3f, -0.1f, -0.2f, -0.3f});
  auto p = PackBeams(0, b);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->tree.tokens, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p->tree.parents, ElementsAre(-1, 0, 1, 2));
  EXPECT_THAT(p->node_log_probs, ElementsAre(0.0f, -0.1f, -0.2f, -0.3f));
  EXPECT_THAT(p->beam_nodes, ElementsAre(1, 2, 3, 1, 2, 3, 1, 2, 3));
  ExpectPathsSpellBeams(*p, b);
}

TEST(PackBeamsTest, FullOverlapExceptLastToken) {
  // Every candidate shares all but its last token: one chain, a fan at the end.
  const Beams b = Make(3, 3, {4, 5, 6, 4, 5, 8, 4, 5, 9});
  auto p = PackBeams(2, b);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->tree.tokens, ElementsAre(2, 4, 5, 6, 8, 9));
  EXPECT_THAT(p->tree.parents, ElementsAre(-1, 0, 1, 2, 2, 2));
  ExpectPathsSpellBeams(*p, b);
}

TEST(PackBeamsTest, NoOverlapKeepsEveryToken) {
  const Beams b = Make(3, 2, {1, 2, 3, 4, 5, 6}, {-1, -2, -3, -4, -5, -6});
  auto p = PackBeams(9, b);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tree.num_nodes(), 1 + 3 * 2);
  EXPECT_THAT(p->tree.tokens, ElementsAre(9, 1, 3, 5, 2, 4, 6));
  EXPECT_THAT(p->tree.parents, ElementsAre(-1, 0, 0, 0, 1, 2, 3));
  EXPECT_THAT(p->node_log_probs, ElementsAre(0, -1, -3, -5, -2, -4, -6));
  ExpectPathsSpellBeams(*p, b);
}

TEST(PackBeamsTest, PartialOverlapAtDifferentDepths) {
  // c0 = 1 2 3 4, c1 = 1 2 5 6 (shares 2), c2 = 1 7 8 9 (shares 1), c3 = 1 2 3 0 (shares 3).
  const Beams b = Make(4, 4, {1, 2, 3, 4, 1, 2, 5, 6, 1, 7, 8, 9, 1, 2, 3, 0});
  EXPECT_THAT(DedupPrefix(b),
              ElementsAre(0, 0, 0, 0, 0, 0, 1, 1, 0, 2, 2, 2, 0, 0, 0, 3));
  auto p = PackBeams(0, b);
  ASSERT_TRUE(p.ok()) << p.status();
  // 16 beam tokens, 10 distinct prefixes.
  EXPECT_EQ(p->tree.num_nodes(), 1 + 10);
  ExpectPathsSpellBeams(*p, b);
}

TEST(PackBeamsTest, WidthOneIsAChain) {
  const Beams b = Make(1, 4, {3, 3, 3, 3});
  auto p = PackBeams(3, b);
  ASSERT_TRUE(p.ok()) << p.status();
  const TokenTree chain = TokenTree::Chain(3, {3, 3, 3, 3});
  EXPECT_EQ(p->tree.tokens, chain.tokens);
  EXPECT_EQ(p->tree.parents, chain.parents);
  EXPECT_TRUE(p->tree.draft.empty());
}

TEST(PackBeamsTest, BadBeamsNameTheField) {
  EXPECT_THAT(PackBeams(0, Make(0, 2, {})).status().message(), HasSubstr("beam width 0"));
  EXPECT_THAT(PackBeams(0, Make(2, 0, {})).status().message(), HasSubstr("beam length 0"));
  EXPECT_THAT(PackBeams(0, Make(2, 2, {1, 2, 3})).status().message(),
              HasSubstr("beam tokens has 3 entries"));
  EXPECT_THAT(PackBeams(0, Make(1, 2, {1, -4})).status().message(),
              HasSubstr("beam tokens[1] = -4"));
  EXPECT_THAT(PackBeams(0, Make(1, 2, {1, 2}, {-1.0f})).status().message(),
              HasSubstr("beam log_probs has 1 entries"));
  EXPECT_THAT(PackBeams(0, Make(1, 2, {1, 2}, {-1.0f, 0.5f})).status().message(),
              HasSubstr("beam log_probs[1] = 0.5"));
  EXPECT_THAT(PackBeams(0, Make(1, 2, {1, 2}, {-1.0f, NAN})).status().message(),
              HasSubstr("beam log_probs[1]"));
  EXPECT_THAT(PackBeams(-1, Make(1, 1, {1})).status().message(), HasSubstr("root token -1"));
  EXPECT_THAT(PackBeams(0, Make(64, 64, std::vector<int32_t>(64 * 64, 1))).status().message(),
              HasSubstr("exceeds the tree limit"));
  EXPECT_EQ(PackBeams(0, Make(0, 2, {})).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace treespec
