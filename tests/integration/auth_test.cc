// Bearer-token authentication of the coordinator's public gRPC API, on real
// processes: treespec-worker (fixture target) and treespec-coordinator with
// --auth_token_file. Missing, wrong and right tokens on both Generation
// methods; a token rotated by rewriting the file while the coordinator runs;
// the health and metrics ports (and grpc.health.v1 on the main port) answering
// without a token; the treespec CLI and treespec-loadgen with and without
// --auth_token_file; a coordinator that refuses to start on a bad file. The
// HTTP side (401, the openai client) is in openai_http_test.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rpc/server.h"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using std::chrono::milliseconds;

constexpr char kToken[] = "tok-3f9a1c7e5b2d";
constexpr char kOtherToken[] = "tok-overlap-77aa";

void WriteText(const std::string& path, const std::string& text) {
  // Written aside and renamed over, as a rotation (or a Secret update) does.
  { std::ofstream(path + ".tmp") << text; }
  ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0) << path;
}

struct Outcome {
  grpc::Status info;
  StreamResult generate;
};

// GetModelInfo and a short Generate with `authorization` ("" sends none).
Outcome Call(const std::string& address, const std::string& authorization) {
  auto stub = v1::Generation::NewStub(MakeChannel(address, TlsFiles{}));
  std::multimap<std::string, std::string> metadata;
  if (!authorization.empty()) metadata.emplace("authorization", authorization);
  Outcome out;
  grpc::ClientContext ctx;
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ModelInfo info;
  out.info = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  out.generate = Stream(stub.get(), MakeRequest(TestPrompt(0), 4), metadata);
  return out;
}

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CliRun RunCli(const std::string& binary, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   BinaryPath(binary)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProcess(argv, milliseconds(120000));
  EXPECT_TRUE(r.ok()) << binary << ": " << r.status();
  CliRun run;
  if (!r.ok()) return run;
  run.output = r->stdout_text;
  if (WIFEXITED(r->wait_status)) run.exit_code = WEXITSTATUS(r->wait_status);
  return run;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir());
    auto worker = ServiceProcess::Start(
        {BinaryPath("treespec-worker"), "--model", FixtureModel(kTargetModel), "--listen",
         "127.0.0.1:0", "--max-context", "256", "--kv-tokens", "16384"},
        *dir_ + "/worker");
    if (!worker.ok()) {
      error_ = new std::string(worker.status().ToString());
      return;
    }
    worker_ = worker->release();
  }
  static void TearDownTestSuite() {
    delete worker_;
    delete dir_;
    delete error_;
    worker_ = nullptr;
    dir_ = error_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(error_, nullptr) << *error_; }

  // A coordinator over the worker with --auth_token_file `token_file`.
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> StartCoordinator(
      const std::string& token_file, const std::string& name) {
    return ServiceProcess::Start(
        {BinaryPath("treespec-coordinator"), "--listen", "127.0.0.1:0", "--workers",
         worker_->address(), "--auth_token_file", token_file, "--health_port", "0",
         "--metrics_port", "0"},
        *dir_ + "/" + name);
  }

  static inline std::string* dir_ = nullptr;
  static inline ServiceProcess* worker_ = nullptr;
  static inline std::string* error_ = nullptr;
};

TEST_F(AuthTest, MissingWrongAndRightTokens) {
  const std::string file = *dir_ + "/tokens-basic";
  WriteText(file, absl::StrCat("# two tokens, both valid\n", kToken, "\n\n", kOtherToken, "\n"));
  auto c = StartCoordinator(file, "coordinator-basic");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string address = (*c)->address();

  Outcome none = Call(address, "");
  EXPECT_EQ(none.info.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.info.error_message();
  EXPECT_THAT(none.info.error_message(), HasSubstr("missing bearer token"));
  EXPECT_EQ(none.generate.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.generate.status.error_message(), HasSubstr("missing bearer token"));
  EXPECT_EQ(none.generate.tokens, 0);

  for (const std::string bad : {"Bearer tok-3f9a1c7e5b2", "Bearer tok-3f9a1c7e5b2dX",
                                "Bearer wrong", "Basic dG9rOg=="}) {
    Outcome wrong = Call(address, bad);
    EXPECT_EQ(wrong.info.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_EQ(wrong.generate.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_EQ(wrong.generate.tokens, 0) << bad;
    const std::string expected =
        absl::StartsWith(bad, "Bearer") ? "invalid bearer token" : "missing bearer token";
    EXPECT_THAT(wrong.generate.status.error_message(), HasSubstr(expected)) << bad;
    EXPECT_THAT(wrong.generate.status.error_message(), Not(HasSubstr(bad.substr(7)))) << bad;
  }

  for (const std::string token : {kToken, kOtherToken}) {
    Outcome right = Call(address, "Bearer " + token);
    EXPECT_TRUE(right.info.ok()) << token << ": " << right.info.error_message();
    EXPECT_TRUE(right.generate.status.ok()) << token << ": " << right.generate.status.error_message();
    EXPECT_EQ(right.generate.tokens, 4) << token;
  }
  // The scheme is case-insensitive (RFC 6750).
  EXPECT_TRUE(Call(address, absl::StrCat("bearer ", kToken)).generate.status.ok());
  // No token ever reaches the log.
  EXPECT_THAT((*c)->log(), Not(HasSubstr(kToken)));
  EXPECT_THAT((*c)->log(), Not(HasSubstr("tok-3f9a1c7e5b2dX")));
}

TEST_F(AuthTest, RotatedTokenIsTakenWithoutARestart) {
  const std::string file = *dir_ + "/tokens-rotate";
  WriteText(file, absl::StrCat(kToken, "\n"));
  auto c = StartCoordinator(file, "coordinator-rotate");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string address = (*c)->address();
  const std::string old_auth = absl::StrCat("Bearer ", kToken);
  const std::string new_auth = "Bearer rotated-token-0042";
  ASSERT_TRUE(Call(address, old_auth).generate.status.ok());
  EXPECT_EQ(Call(address, new_auth).info.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Overlap: both tokens listed, both accepted once the file is re-read.
  WriteText(file, absl::StrCat(kToken, "\nrotated-token-0042\n"));
  EXPECT_TRUE(Eventually([&] { return Call(address, new_auth).info.ok(); }, milliseconds(5000)));
  EXPECT_TRUE(Call(address, old_auth).generate.status.ok());

  // The old token retired: refused within the reload interval (1 s).
  WriteText(file, "rotated-token-0042\n");
  const auto retired = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually(
      [&] { return Call(address, old_auth).info.error_code() == grpc::StatusCode::UNAUTHENTICATED; },
      milliseconds(5000)));
  EXPECT_LT(std::chrono::steady_clock::now() - retired, milliseconds(3000));
  Outcome now_new = Call(address, new_auth);
  EXPECT_TRUE(now_new.generate.status.ok()) << now_new.generate.status.error_message();
  EXPECT_EQ(now_new.generate.tokens, 4);

  // A file emptied by mistake keeps the last good tokens (and says so).
  WriteText(file, "# nothing here\n");
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_TRUE(Call(address, new_auth).generate.status.ok());
  EXPECT_TRUE(Eventually([&] { return absl::StrContains((*c)->log(), "reload failed"); },
                         milliseconds(3000)))
      << (*c)->log();
  EXPECT_TRUE((*c)->running()) << "the coordinator restarted or died";
}

TEST_F(AuthTest, HealthAndMetricsPortsNeedNoToken) {
  const std::string file = *dir_ + "/tokens-ports";
  WriteText(file, absl::StrCat(kToken, "\n"));
  auto c = StartCoordinator(file, "coordinator-ports");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_FALSE((*c)->health().empty());
  ASSERT_FALSE((*c)->metrics().empty());
  EXPECT_EQ(HealthStatus((*c)->health()), 1);
  // grpc.health.v1 on the main port is open too (probes carry no token).
  EXPECT_EQ(HealthStatus((*c)->address()), 1);
  // Refused calls are counted like any other.
  EXPECT_EQ(Call((*c)->address(), "").info.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string metrics = ScrapeMetrics((*c)->metrics());
  EXPECT_THAT(metrics, HasSubstr("UNAUTHENTICATED")) << metrics.substr(0, 2000);
}

TEST_F(AuthTest, CliAndLoadgenSendTheirTokenFile) {
  const std::string file = *dir_ + "/tokens-cli";
  WriteText(file, absl::StrCat(kToken, "\n"));
  auto c = StartCoordinator(file, "coordinator-cli");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string address = (*c)->address();
  const std::string client_file = *dir_ + "/client-token";
  WriteText(client_file, absl::StrCat("# mine\n", kToken, "\nunused-second\n"));
  const std::string wrong_file = *dir_ + "/client-wrong";
  WriteText(wrong_file, "not-the-token\n");

  CliRun run = RunCli("treespec", {"info", "--server", address, "--auth-token-file", client_file});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = RunCli("treespec", {"generate", "--server", address, "--ids", "5,9,17", "--max-tokens",
                            "4", "--drafter", "none", "--auth-token-file", client_file});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = RunCli("treespec", {"generate", "--server", address, "--ids", "5,9,17", "--max-tokens",
                            "4", "--drafter", "none"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: UNAUTHENTICATED: missing bearer token"));
  run = RunCli("treespec", {"info", "--server", address, "--auth-token-file", wrong_file});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("treespec: UNAUTHENTICATED: invalid bearer token"));
  run = RunCli("treespec", {"info", "--server", address, "--auth-token-file", *dir_ + "/absent"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--auth_token_file: " + *dir_ + "/absent"));

  const std::string report = *dir_ + "/loadgen.json";
  const std::string prompts = *dir_ + "/prompts.jsonl";
  {
    // The fixture target has no tokenizer: token-id prompts.
    std::ofstream(prompts) << R"({"token_ids": [5, 9, 17, 33]})" << "\n"
                           << R"({"token_ids": [7, 3, 11]})" << "\n";
  }
  for (const bool with_token : {true, false}) {
    std::vector<std::string> args = {"--server", address, "--concurrency", "2",
                                     "--num-requests", "4", "--max-tokens", "4",
                                     "--drafter", "none", "--progress-interval-s", "0",
                                     "--prompts", prompts, "--json", report};
    if (with_token) args.insert(args.end(), {"--auth-token-file", client_file});
    run = RunCli("treespec-loadgen", args);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    auto j = nlohmann::json::parse(ReadFile(report), nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << run.output;
    const auto& errors = j["summary"]["errors"];
    if (with_token) {
      EXPECT_TRUE(errors.empty()) << errors.dump();
    } else {
      EXPECT_EQ(errors.value("UNAUTHENTICATED", 0), 4) << errors.dump();
    }
  }
}

TEST_F(AuthTest, CoordinatorRefusesToStartWithoutTokens) {
  const std::string empty = *dir_ + "/tokens-empty";
  WriteText(empty, "# rotation in progress\n\n");
  for (const std::string& file : {std::string(*dir_ + "/tokens-absent"), empty}) {
    auto run = RunCli("treespec-coordinator",
                      {"--listen", "127.0.0.1:0", "--workers", worker_->address(),
                       "--auth-token-file", file});
    EXPECT_EQ(run.exit_code, 1) << file << ":\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr("--auth_token_file: " + file)) << run.output;
    EXPECT_THAT(run.output, Not(HasSubstr("listening on"))) << run.output;
  }
}

}  // namespace
}  // namespace treespec::testing
