// The bearer-token file parser, the comparison, the Authorization header
// parsing and BearerAuth's reload (rpc/bearer_auth.h). Behaviour only: the
// comparison's timing is not measured here.
#include "rpc/bearer_auth.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(TokenFileTest, OneTokenPerLineSkippingBlanksAndComments) {
  auto tokens = ParseTokenFile("# rotation 2026-11\n\n  alpha  \r\n#beta\nbeta\n\t\ngamma", "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre("alpha", "beta", "gamma"));
}

TEST(TokenFileTest, NoTokenIsAnErrorNamingTheFile) {
  for (const std::string text : {"", "\n\n", "# only a comment\n   \n"}) {
    auto tokens = ParseTokenFile(text, "/etc/treespec/tokens");
    ASSERT_FALSE(tokens.ok()) << "'" << text << "'";
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tokens.status().message(), HasSubstr("/etc/treespec/tokens: no token"));
  }
}

TEST(TokenFileTest, WhitespaceInsideATokenIsAnErrorNamingTheLine) {
  auto tokens = ParseTokenFile("good\nbad token\n", "tokens.txt");
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(tokens.status().message(), HasSubstr("tokens.txt: line 2"));
  // The message does not repeat the would-be secret.
  EXPECT_THAT(tokens.status().message(), Not(HasSubstr("bad token")));
}

TEST(TokenFileTest, UnreadableFileIsAnError) {
  auto tokens = ReadTokenFile("/nonexistent/treespec/tokens");
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(tokens.status().message(), HasSubstr("/nonexistent/treespec/tokens"));
}

TEST(ConstantTimeEqualsTest, Equality) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "xbc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  // A prefix padded with NULs is not the token.
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  // Every byte value counts (high bit included).
  for (int i = 0; i < 256; ++i) {
    const std::string a(1, static_cast<char>(i));
    EXPECT_TRUE(ConstantTimeEquals(a, a)) << i;
    EXPECT_FALSE(ConstantTimeEquals(a, std::string(1, static_cast<char>(i ^ 0x80)))) << i;
  }
}

TEST(ConstantTimeEqualsTest, MatchesAnyTokenChecksEveryToken) {
  const std::vector<std::string> tokens = {"first", "second", "third"};
  EXPECT_TRUE(MatchesAnyToken(tokens, "first"));
  EXPECT_TRUE(MatchesAnyToken(tokens, "third"));
  EXPECT_FALSE(MatchesAnyToken(tokens, "fourth"));
  EXPECT_FALSE(MatchesAnyToken(tokens, ""));
  EXPECT_FALSE(MatchesAnyToken({}, "first"));
}

TEST(BearerHeaderTest, TokenOfTheAuthorizationValue) {
  EXPECT_EQ(BearerTokenOf("Bearer abc"), "abc");
  EXPECT_EQ(BearerTokenOf("bearer abc"), "abc");
  EXPECT_EQ(BearerTokenOf("BEARER   abc  "), "abc");
  EXPECT_EQ(BearerTokenOf("Bearer"), "");
  EXPECT_EQ(BearerTokenOf("Bearer "), "");
  EXPECT_EQ(BearerTokenOf("Bearerabc"), "");
  EXPECT_EQ(BearerTokenOf("Basic YWJjOmRlZg=="), "");
  EXPECT_EQ(BearerTokenOf("abc"), "");
  EXPECT_EQ(BearerTokenOf(""), "");
}

class BearerAuthTest : public ::testing::Test {
 protected:
  std::string file() const { return dir_.path() + "/tokens"; }
  // Rewrites the file as a rotation tool would: a new file renamed over it.
  void Rewrite(const std::string& contents) {
    testing::WriteFile(file() + ".new", contents);
    ASSERT_EQ(std::rename((file() + ".new").c_str(), file().c_str()), 0);
  }
  testing::TempDir dir_;
};

TEST_F(BearerAuthTest, RefusesToStartWithoutTokens) {
  auto missing = BearerAuth::Create({.token_file = file()});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--auth_token_file"));
  EXPECT_THAT(missing.status().message(), HasSubstr(file()));
  testing::WriteFile(file(), "# nothing yet\n");
  auto empty = BearerAuth::Create({.token_file = file()});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("--auth_token_file"));
  EXPECT_THAT(empty.status().message(), HasSubstr("no token"));
}

TEST_F(BearerAuthTest, MissingWrongAndRightTokens) {
  testing::WriteFile(file(), "one\ntwo\n");
  auto auth = BearerAuth::Create({.token_file = file()});
  ASSERT_TRUE(auth.ok()) << auth.status();
  absl::Status st = (*auth)->Check("");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(st.message(), HasSubstr("missing bearer token"));
  st = (*auth)->Check("Basic b25lOg==");
  EXPECT_THAT(st.message(), HasSubstr("missing bearer token"));
  st = (*auth)->Check("Bearer three");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(st.message(), HasSubstr("invalid bearer token"));
  EXPECT_THAT(st.message(), Not(HasSubstr("three")));
  EXPECT_TRUE((*auth)->Check("Bearer one").ok());
  EXPECT_TRUE((*auth)->Check("Bearer two").ok());
}

TEST_F(BearerAuthTest, ReloadsAChangedFileAndKeepsTokensWhenTheReloadFails) {
  testing::WriteFile(file(), "old\n");
  auto auth = BearerAuth::Create({.token_file = file(), .reload_interval = absl::ZeroDuration()});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Check("Bearer old").ok());
  // Overlap: both accepted.
  Rewrite("old\nnew\n");
  EXPECT_TRUE((*auth)->Check("Bearer new").ok());
  EXPECT_TRUE((*auth)->Check("Bearer old").ok());
  // The old one retired.
  Rewrite("new\n");
  EXPECT_FALSE((*auth)->Check("Bearer old").ok());
  EXPECT_TRUE((*auth)->Check("Bearer new").ok());
  EXPECT_EQ((*auth)->num_reloads(), 2);
  // A broken file (no token) or a missing one keeps the last good tokens.
  Rewrite("# emptied by mistake\n");
  EXPECT_TRUE((*auth)->Check("Bearer new").ok());
  ASSERT_EQ(unlink(file().c_str()), 0);
  EXPECT_TRUE((*auth)->Check("Bearer new").ok());
  EXPECT_EQ((*auth)->num_reloads(), 2);
  // And a good file afterwards is picked up.
  Rewrite("newest\n");
  EXPECT_TRUE((*auth)->Check("Bearer newest").ok());
  EXPECT_FALSE((*auth)->Check("Bearer new").ok());
  EXPECT_EQ((*auth)->num_reloads(), 3);
}

TEST_F(BearerAuthTest, LooksAtTheFileAtMostOncePerInterval) {
  testing::WriteFile(file(), "old\n");
  auto auth = BearerAuth::Create({.token_file = file(), .reload_interval = absl::Hours(1)});
  ASSERT_TRUE(auth.ok()) << auth.status();
  Rewrite("new\n");
  // Within the interval the file is not looked at again.
  EXPECT_TRUE((*auth)->Check("Bearer old").ok());
  EXPECT_FALSE((*auth)->Check("Bearer new").ok());
  EXPECT_EQ((*auth)->num_reloads(), 0);
}

TEST(ClientAuthorizationTest, SendsTheFirstToken) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/t", "# client\nfirst\nsecond\n");
  auto value = ClientAuthorization("--auth_token_file", dir.path() + "/t");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "Bearer first");
  auto missing = ClientAuthorization("--auth_token_file", dir.path() + "/absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--auth_token_file: "));
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.path() + "/absent"));
}

}  // namespace
}  // namespace treespec
