#include "core/spec/tree_shape.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TreeShapeTest, ParsesPaperShape) {
  absl::StatusOr<TreeShape> s = TreeShape::Parse("3,2,2,1,1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->fanouts(), ElementsAre(3, 2, 2, 1, 1));
  EXPECT_EQ(s->Depth(), 5);
  EXPECT_THAT(s->LevelSizes(), ElementsAre(3, 6, 12, 12, 12));
  EXPECT_EQ(s->NumDraftNodes(), 45);
  EXPECT_EQ(s->NumNodes(), 46);
  EXPECT_FALSE(s->IsChain());
  EXPECT_EQ(s->ToString(), "3,2,2,1,1");
}

TEST(TreeShapeTest, ChainForms) {
  absl::StatusOr<TreeShape> a = TreeShape::Parse("chain:4");
  absl::StatusOr<TreeShape> b = TreeShape::Parse("1,1,1,1");
  absl::StatusOr<TreeShape> c = TreeShape::Chain(4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, *c);
  EXPECT_NE(*a, *TreeShape::Parse("chain:3"));
  EXPECT_TRUE(a->IsChain());
  EXPECT_EQ(a->Depth(), 4);
  EXPECT_EQ(a->NumNodes(), 5);
  EXPECT_EQ(a->ToString(), "chain:4");
}

TEST(TreeShapeTest, ToStringRoundTrips) {
  for (const char* text : {"3,2,2,1,1", "chain:1", "chain:16", "8,8,6", "1,4", "2,1,1"}) {
    absl::StatusOr<TreeShape> s = TreeShape::Parse(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    absl::StatusOr<TreeShape> again = TreeShape::Parse(s->ToString());
    ASSERT_TRUE(again.ok()) << text;
    EXPECT_EQ(*s, *again) << text;
  }
}

TEST(TreeShapeTest, AcceptsWhitespaceAndLimits) {
  EXPECT_TRUE(TreeShape::Parse(" 3, 2 ,1 ").ok());
  // 1 + 511 = 512 nodes: the largest allowed.
  absl::StatusOr<TreeShape> wide = TreeShape::Parse("511");
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->NumNodes(), kMaxShapeNodes);
  EXPECT_TRUE(TreeShape::Parse("1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1").ok());
  EXPECT_TRUE(TreeShape::FromFanouts(std::vector<int32_t>(16, 1)).ok());
}

struct BadShape {
  std::string text;
  std::string message;
};

TEST(TreeShapeTest, RejectsBadShapes) {
  const std::vector<BadShape> cases = {
      {"", "it is empty"},
      {"   ", "it is empty"},
      {"abc", "\"abc\" is not a positive integer"},
      {"3,x,1", "\"x\" is not a positive integer"},
      {"3,,1", "\"\" is not a positive integer"},
      {"3,2,", "\"\" is not a positive integer"},
      {",3", "\"\" is not a positive integer"},
      {"3,0,1", "a level has 0 children"},
      {"0", "a level has 0 children"},
      {"-1", "\"-1\" is not a positive integer"},
      {"3,-2", "\"-2\" is not a positive integer"},
      {"+3", "\"+3\" is not a positive integer"},
      {"2.5", "\"2.5\" is not a positive integer"},
      {"1e2", "\"1e2\" is not a positive integer"},
      {"99999999999999999999", "not a positive integer"},
      {"8,8,8", "more than 512 nodes"},
      {"600", "more than 512 nodes"},
      {"2,2,2,2,2,2,2,2,2", "more than 512 nodes"},
      {"1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "more than 16 levels"},
      {"chain:", "chain length is not a positive integer"},
      {"chain:x", "chain length is not a positive integer"},
      {"chain:0", "chain length must be in [1, 16]"},
      {"chain:17", "chain length must be in [1, 16]"},
      {"chain:-2", "chain length is not a positive integer"},
      {"Chain:3", "not a positive integer"},
      {"3;2", "not a positive integer"},
  };
  for (const BadShape& c : cases) {
    absl::StatusOr<TreeShape> s = TreeShape::Parse(c.text);
    ASSERT_FALSE(s.ok()) << "\"" << c.text << "\" parsed as " << s->ToString();
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    const std::string msg(s.status().message());
    EXPECT_THAT(msg, HasSubstr("tree: \"" + c.text + "\"")) << c.text;
    EXPECT_THAT(msg, HasSubstr(c.message)) << c.text;
  }
  EXPECT_FALSE(TreeShape::FromFanouts({}).ok());
  EXPECT_FALSE(TreeShape::FromFanouts({2, 0}).ok());
  EXPECT_FALSE(TreeShape::Chain(0).ok());
}

}  // namespace
}  // namespace treespec
