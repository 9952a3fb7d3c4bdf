// The command-line surface of the binaries, run as processes: --help output,
// argument errors, and how failed calls are reported.
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int exit_code = -1;  // -1: did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

CliRun RunBinary(const std::string& binary, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   BinaryPath(binary)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProcess(argv, std::chrono::milliseconds(60000));
  EXPECT_TRUE(r.ok()) << binary << ": " << r.status();
  CliRun run;
  if (!r.ok()) return run;
  run.output = r->stdout_text;
  if (WIFEXITED(r->wait_status)) run.exit_code = WEXITSTATUS(r->wait_status);
  return run;
}

// Every binary's --help lists its own flags under their files relative to the
// source root, not the build machine's path.
TEST(CliTest, HelpListsFlagsUnderSourceRelativeFiles) {
  struct Binary {
    std::string name;
    std::string flag;  // a flag --help must list
  };
  const std::vector<Binary> binaries = {
      {"treespec", "--server"},          {"treespec-worker", "--model"},
      {"treespec-drafter", "--kind"},    {"treespec-coordinator", "--workers"},
      {"treespec-logits", "--ids"},      {"treespec-generate", "--model"},
      {"treespec-loadgen", "--server"},
  };
  const std::regex from_re("Flags from ([^ \n]+):");
  for (const Binary& b : binaries) {
    const CliRun run = RunBinary(b.name, {"--help"});
    const std::string& out = run.output;
    EXPECT_THAT(out, HasSubstr(b.flag + " (")) << b.name << ":\n" << out;
    EXPECT_THAT(out, Not(HasSubstr(SourceDir()))) << b.name << ":\n" << out;
    int files = 0;
    for (std::sregex_iterator m(out.begin(), out.end(), from_re), end; m != end; ++m, ++files) {
      const std::string file = (*m)[1];
      EXPECT_FALSE(absl::StartsWith(file, "/") || absl::StartsWith(file, "."))
          << b.name << ": flags listed under '" << file << "'";
      EXPECT_TRUE(std::filesystem::is_regular_file(SourceDir() + "/" + file))
          << b.name << ": '" << file << "' is not a file under the source root";
    }
    EXPECT_GT(files, 0) << b.name << ":\n" << out;
  }
}

TEST(CliTest, LogitsWithEmptyIdsSaysNoTokenIds) {
  // The fixture model has no tokenizer: ids must not need one.
  for (const std::string ids : {"", " , "}) {
    const CliRun run = RunBinary("treespec-logits", {"--model", FixtureModel(kTargetModel), "--out",
                                                  "/dev/null", "--ids", ids});
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_THAT(run.output, HasSubstr("INVALID_ARGUMENT: --ids: no token ids")) << run.output;
    EXPECT_THAT(run.output, Not(HasSubstr("tokenizer"))) << run.output;
  }
}

TEST(CliTest, ClientPrintsStatusCodeNames) {
  // Nothing listens on port 1: the call fails UNAVAILABLE.
  CliRun run = RunBinary("treespec", {"generate", "--server", "127.0.0.1:1", "--ids", "1,2",
                                   "--timeout-s", "20"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: UNAVAILABLE: ")) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("treespec: 14"))) << run.output;

  run = RunBinary("treespec", {"info", "--server", "127.0.0.1:1"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: UNAVAILABLE: ")) << run.output;

  // Command-line mistakes are caught before any call, with exit code 2.
  run = RunBinary("treespec", {"generate", "--server", "127.0.0.1:1", "--ids", ""});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: INVALID_ARGUMENT: --ids: no token ids"))
      << run.output;
  run = RunBinary("treespec", {"generate", "--server", "127.0.0.1:1", "--ids", "1",
                               "--verify", "sometimes"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: INVALID_ARGUMENT: --verify: 'sometimes'"))
      << run.output;
}

}  // namespace
}  // namespace treespec::testing
