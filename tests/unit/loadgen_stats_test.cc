// The load generator's statistics and workload parsing (tools/loadgen):
// per-token ITL convention, percentiles, goodput, JSONL errors.
#include "gtest/gtest.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

namespace treespec::loadgen {
namespace {

TEST(LoadgenStatsTest, ChunksCountPerToken) {
  // Sent at 1.0; chunks of 1, 3 and 2 tokens at 1.1, 1.3 and 1.6.
  TokenTimeline t(1.0);
  t.OnChunk(1.1, 1);
  t.OnChunk(1.3, 3);
  t.OnChunk(1.45, 0);  // a text-only chunk changes nothing
  t.OnChunk(1.6, 2);
  RequestResult r;
  t.Finish(&r);
  EXPECT_EQ(r.output_tokens, 6);
  EXPECT_NEAR(r.ttft_s, 0.1, 1e-12);
  ASSERT_EQ(r.itl_s.size(), 5u);  // n - 1
  EXPECT_NEAR(r.itl_s[0], 0.2, 1e-12);
  EXPECT_EQ(r.itl_s[1], 0.0);
  EXPECT_EQ(r.itl_s[2], 0.0);
  EXPECT_NEAR(r.itl_s[3], 0.3, 1e-12);
  EXPECT_EQ(r.itl_s[4], 0.0);
  EXPECT_NEAR(r.tpot_s, 0.5 / 5, 1e-12);
}

TEST(LoadgenStatsTest, FirstChunkOfSeveralTokensAddsZeroGaps) {
  TokenTimeline t(0.0);
  t.OnChunk(0.5, 3);
  RequestResult r;
  t.Finish(&r);
  EXPECT_EQ(r.itl_s, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(r.tpot_s, 0.0);
}

TEST(LoadgenStatsTest, PercentilesInterpolate) {
  Distribution d = Summarize(std::vector<double>{4, 1, 3, 2, 5});
  EXPECT_EQ(d.count, 5u);
  EXPECT_DOUBLE_EQ(d.mean, 3);
  EXPECT_DOUBLE_EQ(d.p50, 3);
  EXPECT_DOUBLE_EQ(d.p90, 4.6);
  EXPECT_DOUBLE_EQ(d.p99, 4.96);
  EXPECT_DOUBLE_EQ(d.max, 5);
  EXPECT_EQ(Summarize(std::vector<double>{}).count, 0u);
}

TEST(LoadgenStatsTest, SummaryCountsGoodputErrorsAndAcceptance) {
  RequestResult fast;
  fast.ttft_s = 0.05;
  fast.ok = true;
  fast.e2e_s = 0.5;
  fast.tpot_s = 0.01;
  fast.output_tokens = 10;
  fast.steps = 4;
  fast.drafted_tokens = 12;
  fast.accepted_tokens = 6;
  RequestResult slow = fast;
  slow.ttft_s = 0.5;
  RequestResult failed;
  failed.ok = false;
  failed.code = "UNAVAILABLE";
  Summary s = Summarize({fast, slow, failed}, 2.0, Slo{.ttft_ms = 100, .tpot_ms = 20});
  EXPECT_EQ(s.num_requests, 3);
  EXPECT_EQ(s.num_ok, 2);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(s.num_good, 1);
  EXPECT_DOUBLE_EQ(s.goodput, 0.5);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.token_throughput, 10.0);
  EXPECT_DOUBLE_EQ(s.mean_accepted_length, (12.0 + 8.0) / 8.0);
  EXPECT_DOUBLE_EQ(s.acceptance_rate, 0.5);
  nlohmann::json j = ToJson(s);
  EXPECT_EQ(j["errors"]["UNAVAILABLE"], 1);
  EXPECT_DOUBLE_EQ(j["ttft"]["max_ms"].get<double>(), 500.0);
}

// A request the load generator cancelled on purpose (--cancel_every) that
// ended CANCELLED is counted apart, not as an error; ending otherwise, it is.
TEST(LoadgenStatsTest, ClientCancellationsAreNoErrors) {
  RequestResult ok;
  ok.ok = true;
  ok.output_tokens = 3;
  RequestResult cancelled;
  cancelled.code = "CANCELLED";
  cancelled.client_cancelled = true;
  RequestResult cancelled_but_failed = cancelled;
  cancelled_but_failed.code = "UNAVAILABLE";
  RequestResult cancelled_by_server;
  cancelled_by_server.code = "CANCELLED";
  Summary s = Summarize({ok, cancelled, cancelled_but_failed, cancelled_by_server}, 1.0, Slo{});
  EXPECT_EQ(s.num_requests, 4);
  EXPECT_EQ(s.num_ok, 1);
  EXPECT_EQ(s.num_client_cancelled, 1);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(s.errors.at("CANCELLED"), 1) << "a cancel the client did not ask for is an error";
  EXPECT_EQ(ToJson(s)["num_client_cancelled"], 1);
  EXPECT_NE(FormatTable(s).find("cancelled by the client"), std::string::npos);
}

TEST(LoadgenWorkloadTest, JsonlFieldsAndDefaults) {
  RequestDefaults d;
  d.max_tokens = 7;
  d.drafter = "mamba";
  auto reqs = ParsePromptsJsonl(
      "{\"prompt\": \"hi\", \"tree\": \"2,2\", \"stop\": [\"x\", \"y\"], \"verification\": "
      "\"multiround\", \"temperature\": 0.7}\n\n"
      "{\"token_ids\": [1, 2, 3], \"max_tokens\": 3, \"drafter\": \"none\"}\n",
      d);
  ASSERT_TRUE(reqs.ok()) << reqs.status();
  ASSERT_EQ(reqs->size(), 2u);
  const v1::GenerateRequest& a = (*reqs)[0];
  EXPECT_EQ(a.text(), "hi");
  EXPECT_EQ(a.max_tokens(), 7);
  EXPECT_EQ(a.speculation().drafter(), "mamba");
  EXPECT_EQ(a.speculation().tree(), "2,2");
  EXPECT_EQ(a.stop_size(), 2);
  EXPECT_EQ(a.speculation().verification(), v1::VERIFICATION_MODE_MULTIROUND);
  EXPECT_FLOAT_EQ(a.sampling().temperature(), 0.7f);
  const v1::GenerateRequest& b = (*reqs)[1];
  EXPECT_EQ(b.token_ids().ids_size(), 3);
  EXPECT_EQ(b.max_tokens(), 3);
  EXPECT_EQ(b.speculation().drafter(), "none");
  EXPECT_NE(a.sampling().seed(), b.sampling().seed());
}

TEST(LoadgenWorkloadTest, ErrorsNameTheLine) {
  auto bad_json = ParsePromptsJsonl("{\"prompt\": \"ok\"}\n{not json\n", {});
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("line 2"), std::string::npos) << bad_json.status();
  auto no_prompt = ParsePromptsJsonl("{\"max_tokens\": 3}\n", {});
  ASSERT_FALSE(no_prompt.ok());
  EXPECT_NE(no_prompt.status().message().find("\"prompt\" or \"token_ids\""), std::string::npos);
  auto bad_type = ParsePromptsJsonl("{\"prompt\": 5}\n", {});
  EXPECT_FALSE(bad_type.ok());
  EXPECT_FALSE(ParsePromptsJsonl("\n# nothing\n", {}).ok());
  EXPECT_FALSE(BuiltinPrompts({}).empty());
}

}  // namespace
}  // namespace treespec::loadgen
