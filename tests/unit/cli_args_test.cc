// ParsePositiveInts (core/util/cli_args.h): the comma lists of the benchmarks'
// flags, and the error that names the flag and the bad item.
#include "core/util/cli_args.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace treespec {
namespace {

TEST(ParsePositiveIntsTest, ParsesListsAndSkipsEmptyItems) {
  absl::StatusOr<std::vector<int>> v = ParsePositiveInts("threads", "1,2,16");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<int>{1, 2, 16}));
  v = ParsePositiveInts("threads", "4,,8,");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<int>{4, 8}));
  v = ParsePositiveInts("threads", "");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->empty());
}

TEST(ParsePositiveIntsTest, BadItemsNameTheFlagAndTheItem) {
  for (const char* bad : {"1,x", "0", "-3", "2,1.5", "99999999999"}) {
    absl::StatusOr<std::vector<int>> v = ParsePositiveInts("batches", bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(v.status().message().find("--batches"), std::string::npos) << v.status();
    EXPECT_NE(v.status().message().find("is not a positive integer"), std::string::npos)
        << v.status();
  }
}

}  // namespace
}  // namespace treespec
