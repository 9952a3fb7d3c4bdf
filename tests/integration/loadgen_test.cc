// treespec-loadgen against a local deployment (in-process services, fixture
// models, token-id prompts): closed and open loop, per-request speculation
// settings from JSONL, the JSON report's counts, the per-token ITL
// convention, error counts by code, goodput against SLOs.
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using nlohmann::json;

class LoadgenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterConfig config;
    config.garbage = false;
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    dir_ = TempDir();
  }

  std::string WritePrompts(const std::string& name, const std::vector<std::string>& lines) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    return path;
  }

  // Runs the binary; returns its JSON report.
  json Run(std::vector<std::string> args, std::string* table = nullptr) {
    const std::string out = dir_ + "/report.json";
    std::vector<std::string> argv = {BinaryPath("treespec-loadgen"), "--server",
                                     cluster_->coordinator()->address(), "--json", out,
                                     "--progress-interval-s", "0.2"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, std::chrono::milliseconds(120000));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_TRUE(WIFEXITED(r->wait_status) && WEXITSTATUS(r->wait_status) == 0)
        << "wait status " << r->wait_status;
    if (table != nullptr) *table = r->stdout_text;
    return json::parse(ReadFile(out), nullptr, false);
  }

  std::unique_ptr<Cluster> cluster_;
  std::string dir_;
};

const std::vector<std::string> kMixed = {
    R"({"token_ids": [5, 9, 17, 33], "max_tokens": 12, "drafter": "mamba", "tree": "2,2", "ignore_eos": true})",
    R"({"token_ids": [7, 3, 11], "max_tokens": 9, "drafter": "self", "tree": "3,1", "ignore_eos": true})",
    R"(# comments and blank lines are skipped)",
    R"()",
    R"({"token_ids": [40, 41, 42, 43, 44], "max_tokens": 6, "drafter": "none", "ignore_eos": true})",
};

TEST_F(LoadgenTest, ClosedLoopReportsEveryRequest) {
  std::string table;
  json j = Run({"--concurrency", "3", "--num-requests", "12", "--prompts",
                WritePrompts("mixed.jsonl", kMixed), "--slo-ttft-ms", "100000"},
               &table);
  ASSERT_TRUE(j.is_object()) << "no JSON report";
  const json& s = j["summary"];
  EXPECT_EQ(s["num_requests"], 12);
  EXPECT_EQ(s["num_ok"], 12);
  EXPECT_TRUE(s["errors"].empty()) << s["errors"].dump();
  // Requests cycle through the three prompts: 4 x (12 + 9 + 6) tokens.
  EXPECT_EQ(s["output_tokens"], 4 * (12 + 9 + 6));
  EXPECT_EQ(s["ttft"]["count"], 12);
  EXPECT_EQ(s["tpot"]["count"], 12);
  EXPECT_EQ(s["e2e"]["count"], 12);
  // Per-token ITL: n tokens give n - 1 samples.
  EXPECT_EQ(s["itl"]["count"], 4 * (11 + 8 + 5));
  EXPECT_GE(s["ttft"]["p99_ms"].get<double>(), s["ttft"]["p50_ms"].get<double>());
  EXPECT_GT(s["token_throughput"].get<double>(), 0);
  EXPECT_GE(s["mean_accepted_length"].get<double>(), 1.0);
  EXPECT_EQ(s["num_good"], 12);
  ASSERT_EQ(j["requests"].size(), 12u);
  for (const json& r : j["requests"]) {
    EXPECT_TRUE(r["ok"].get<bool>());
    EXPECT_LE(r["ttft_ms"].get<double>(), r["e2e_ms"].get<double>());
  }
  // Speculation settings are per request: the plain requests drafted nothing.
  EXPECT_EQ(j["requests"][2]["drafted_tokens"], 0);
  EXPECT_GT(j["requests"][0]["drafted_tokens"].get<int>(), 0);
  EXPECT_NE(table.find("time to first token"), std::string::npos) << table;
  EXPECT_NE(table.find("goodput"), std::string::npos) << table;
}

TEST_F(LoadgenTest, OpenLoopSpreadsPoissonArrivals) {
  json j = Run({"--rate", "40", "--num-requests", "10", "--prompts",
                WritePrompts("mixed.jsonl", kMixed), "--slo-ttft-ms", "0.000001"});
  ASSERT_TRUE(j.is_object()) << "no JSON report";
  EXPECT_EQ(j["summary"]["num_ok"], 10);
  EXPECT_EQ(j["summary"]["num_good"], 0) << "nothing meets a 1 ns TTFT SLO";
  double last = -1;
  for (const json& r : j["requests"]) {
    EXPECT_GE(r["scheduled_s"].get<double>(), last);
    EXPECT_GE(r["start_s"].get<double>(), r["scheduled_s"].get<double>() - 1e-3);
    last = r["scheduled_s"].get<double>();
  }
  EXPECT_GT(last, 0.05) << "10 arrivals at 40/s take about a quarter of a second";
}

// --duration_s: the closed loop runs for a time instead of a count (the
// requests in flight at the end finish); --cancel_every 3: every third
// request is cancelled after its first token and reported apart.
TEST_F(LoadgenTest, ClosedLoopForADurationWithClientCancels) {
  std::string table;
  json j = Run({"--concurrency", "2", "--duration-s", "1.5", "--num-requests", "100000",
                "--cancel-every", "3", "--prompts",
                WritePrompts("long.jsonl", {R"({"token_ids": [5, 9, 17], "max_tokens": 120,)"
                                            R"( "drafter": "mamba", "ignore_eos": true})"})},
               &table);
  ASSERT_TRUE(j.is_object()) << "no JSON report";
  const json& s = j["summary"];
  const int n = s["num_requests"].get<int>();
  EXPECT_GE(n, 3) << "1.5 s of two clients";
  EXPECT_LT(n, 100000);
  EXPECT_TRUE(s["errors"].empty()) << s["errors"].dump();
  EXPECT_EQ(s["num_client_cancelled"].get<int>() + s["num_ok"].get<int>(), n);
  EXPECT_EQ(s["num_client_cancelled"], n / 3);
  ASSERT_EQ(j["requests"].size(), static_cast<size_t>(n));
  for (size_t i = 0; i < j["requests"].size(); ++i) {
    const json& r = j["requests"][i];
    EXPECT_EQ(r["client_cancelled"].get<bool>(), i % 3 == 2) << "request " << i;
    if (!r["client_cancelled"].get<bool>()) {
      EXPECT_TRUE(r["ok"].get<bool>()) << "request " << i;
      EXPECT_EQ(r["output_tokens"], 120) << "request " << i;
    } else {
      EXPECT_EQ(r["code"], "CANCELLED") << "request " << i;
      EXPECT_LT(r["output_tokens"].get<int>(), 120) << "request " << i;
    }
  }
  EXPECT_NE(table.find("cancelled by the client"), std::string::npos) << table;
}

TEST_F(LoadgenTest, ErrorsAreCountedByCode) {
  json j = Run({"--concurrency", "2", "--num-requests", "4", "--prompts",
                WritePrompts("bad.jsonl",
                             {R"({"token_ids": [5, 6], "max_tokens": 4, "drafter": "nope"})",
                              R"({"token_ids": [5, 6], "max_tokens": 4, "drafter": "none"})"})});
  ASSERT_TRUE(j.is_object()) << "no JSON report";
  EXPECT_EQ(j["summary"]["num_ok"], 2);
  EXPECT_EQ(j["summary"]["errors"]["INVALID_ARGUMENT"], 2);
}

TEST_F(LoadgenTest, RejectsBadCommandLines) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--num-requests", "2"},
        std::vector<std::string>{"--concurrency", "2", "--rate", "3"},
        std::vector<std::string>{"--rate", "3", "--duration-s", "5"},
        std::vector<std::string>{"--concurrency", "2", "--cancel-every", "-1"},
        std::vector<std::string>{"--concurrency", "2", "--prompts", "/nonexistent.jsonl"}}) {
    std::vector<std::string> argv = {BinaryPath("treespec-loadgen"), "--server",
                                     cluster_->coordinator()->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, std::chrono::milliseconds(30000));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(WIFEXITED(r->wait_status) && WEXITSTATUS(r->wait_status) == 2)
        << "wait status " << r->wait_status << " for " << args[0];
  }
}

}  // namespace
}  // namespace treespec::testing
