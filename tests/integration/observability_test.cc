// Metrics and traces of a real deployment: worker, Mamba drafter and
// coordinator binaries (demo models) exporting OTLP to an in-process receiver
// and serving /metrics. One request must yield one trace with spans from all
// three services and correct parent links; prompt and completion text must
// appear in no span and no log.
#include <set>

#include "gtest/gtest.h"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using SpanProto = opentelemetry::proto::trace::v1::Span;

constexpr char kClientTrace[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kClientSpan[] = "b7ad6b7169203331";
constexpr char kPrompt[] = "Once upon a time, a purple elephant named Zorbulon";

std::string Attr(const SpanProto& s, const std::string& key) {
  for (const auto& kv : s.attributes()) {
    if (kv.key() != key) continue;
    const auto& v = kv.value();
    if (v.has_string_value()) return v.string_value();
    if (v.has_int_value()) return std::to_string(v.int_value());
    if (v.has_double_value()) return std::to_string(v.double_value());
    if (v.has_bool_value()) return v.bool_value() ? "true" : "false";
  }
  return "";
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDemoModels()) GTEST_SKIP() << "models/demo is missing";
  }

  // Stops the deployment with SIGTERM (flushing traces) and checks exit 0.
  void StopAll(Deployment* d) {
    for (ServiceProcess* p : {d->coordinator.get(), d->drafter.get(), d->worker.get()}) {
      p->Signal(SIGTERM);
      const int status = p->Wait(std::chrono::seconds(30));
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
    }
  }

  static std::vector<OtlpReceiver::Span> InTrace(const std::vector<OtlpReceiver::Span>& all,
                                                 const std::string& trace_hex) {
    std::vector<OtlpReceiver::Span> out;
    for (const auto& s : all) {
      if (Hex(s.span.trace_id()) == trace_hex) out.push_back(s);
    }
    return out;
  }
};

TEST_F(ObservabilityTest, OneRequestIsOneTraceAcrossTheThreeServices) {
  OtlpReceiver receiver;
  auto d = Deployment::Start({"--otlp_endpoint", receiver.endpoint(), "--trace_sample_ratio", "1"});
  ASSERT_TRUE(d.ok()) << d.status();
  auto stub = (*d)->Stub();
  const std::string traceparent = absl::StrCat("00-", kClientTrace, "-", kClientSpan, "-01");
  StreamResult r = Stream(stub.get(), TextRequest(kPrompt, 24), {{"traceparent", traceparent}});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.tokens, 24);
  ASSERT_GT(r.text.size(), 20u);
  // An invalid traceparent is no error: the request starts a new trace.
  StreamResult bad = Stream(stub.get(), TextRequest(kPrompt, 8),
                            {{"traceparent", "00-not-a-trace-01"}});
  ASSERT_TRUE(bad.status.ok()) << bad.status.error_message();
  StopAll(d->get());

  const std::vector<OtlpReceiver::Span> all = receiver.spans();
  const std::vector<OtlpReceiver::Span> trace = InTrace(all, kClientTrace);
  std::map<std::string, std::set<std::string>> names_by_service;
  std::map<std::string, std::vector<SpanProto>> by_name;
  for (const auto& s : trace) {
    names_by_service[s.service].insert(s.span.name());
    by_name[s.span.name()].push_back(s.span);
    if (s.service == "treespec-worker") {
      EXPECT_EQ(s.rank, 0);
    }
  }
  for (const char* svc : {"treespec-coordinator", "treespec-worker", "treespec-drafter"}) {
    EXPECT_TRUE(names_by_service.count(svc)) << "no span from " << svc << " in the client's trace";
  }
  ASSERT_EQ(by_name["generate"].size(), 1u);
  const SpanProto generate = by_name["generate"][0];
  EXPECT_EQ(Hex(generate.parent_span_id()), kClientSpan);
  EXPECT_EQ(generate.kind(), SpanProto::SPAN_KIND_SERVER);
  EXPECT_EQ(Attr(generate, "treespec.completion_tokens"), "24");
  EXPECT_EQ(Attr(generate, "treespec.drafter"), "mamba");
  for (const char* name : {"queue", "prefill", "drafter_open", "draft", "verify"}) {
    ASSERT_FALSE(by_name[name].empty()) << "no '" << name << "' span";
    for (const SpanProto& s : by_name[name]) {
      EXPECT_EQ(s.parent_span_id(), generate.span_id()) << name << " is not a child of generate";
    }
  }
  // 24 tokens: the first from prefill, the rest from verify steps.
  int64_t steps_tokens = 0;
  for (const SpanProto& v : by_name["verify"]) {
    EXPECT_FALSE(Attr(v, "treespec.tree.size").empty());
    ASSERT_FALSE(Attr(v, "treespec.accepted").empty());
    steps_tokens += std::stoi(Attr(v, "treespec.accepted")) + 1;
  }
  EXPECT_EQ(steps_tokens, 23);
  for (const SpanProto& s : by_name["draft"]) EXPECT_FALSE(Attr(s, "treespec.tree").empty());
  // Server spans of the worker and drafter hang off the coordinator's spans.
  auto ids = [&](const std::string& name) {
    std::set<std::string> out;
    for (const SpanProto& s : by_name[name]) out.insert(s.span_id());
    return out;
  };
  const std::pair<const char*, const char*> edges[] = {
      {"treespec.v1.Worker/Open", "prefill"},
      {"treespec.v1.Worker/Verify", "verify"},
      {"treespec.v1.Drafter/Open", "drafter_open"},
      {"treespec.v1.Drafter/Draft", "draft"},
  };
  for (const auto& [server, client] : edges) {
    ASSERT_FALSE(by_name[server].empty()) << "no '" << server << "' span";
    EXPECT_EQ(by_name[server].size(), by_name[client].size()) << server;
    for (const SpanProto& s : by_name[server]) {
      EXPECT_EQ(s.kind(), SpanProto::SPAN_KIND_SERVER);
      EXPECT_TRUE(ids(client).count(s.parent_span_id())) << server << " is not a child of a "
                                                         << client << " span";
    }
  }

  // The request with a bad traceparent: its own root trace, still complete.
  std::string other_trace;
  for (const auto& s : all) {
    if (s.span.name() == "generate" && Hex(s.span.trace_id()) != kClientTrace) {
      EXPECT_TRUE(s.span.parent_span_id().empty()) << "a new root has no parent";
      other_trace = Hex(s.span.trace_id());
    }
  }
  ASSERT_FALSE(other_trace.empty());
  std::set<std::string> other_services;
  for (const auto& s : InTrace(all, other_trace)) other_services.insert(s.service);
  EXPECT_EQ(other_services.size(), 3u);

  // No request text anywhere: not in spans, not in any process's output.
  const std::string raw = receiver.raw();
  const std::string logs = (*d)->Logs();
  for (const std::string& text : {std::string(kPrompt), std::string("Zorbulon"), r.text}) {
    EXPECT_EQ(raw.find(text), std::string::npos) << "'" << text << "' is in an exported span";
    EXPECT_EQ(logs.find(text), std::string::npos) << "'" << text << "' is in a log";
  }
}

TEST_F(ObservabilityTest, StepEventsModeRecordsOneDecodeSpanPerSequence) {
  OtlpReceiver receiver;
  auto d = Deployment::Start({"--otlp_endpoint", receiver.endpoint()}, {"--trace_steps", "events"});
  ASSERT_TRUE(d.ok()) << d.status();
  auto stub = (*d)->Stub();
  StreamResult r = Stream(stub.get(), TextRequest(kPrompt, 16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  StopAll(d->get());
  std::map<std::string, std::vector<SpanProto>> by_name;
  for (const auto& s : receiver.spans()) by_name[s.span.name()].push_back(s.span);
  EXPECT_TRUE(by_name["draft"].empty());
  EXPECT_TRUE(by_name["verify"].empty());
  ASSERT_EQ(by_name["decode"].size(), 1u);
  const SpanProto decode = by_name["decode"][0];
  int verify_events = 0;
  for (const auto& e : decode.events()) verify_events += e.name() == "verify";
  EXPECT_GT(verify_events, 0);
  EXPECT_EQ(std::to_string(verify_events), Attr(decode, "treespec.steps"));
  // Step RPCs are children of the decode span.
  ASSERT_FALSE(by_name["treespec.v1.Worker/Verify"].empty());
  for (const SpanProto& s : by_name["treespec.v1.Worker/Verify"]) {
    EXPECT_EQ(s.parent_span_id(), decode.span_id());
  }
}

TEST_F(ObservabilityTest, UnsampledRequestsPropagateTheirDecision) {
  OtlpReceiver receiver;
  auto d = Deployment::Start({"--otlp_endpoint", receiver.endpoint(), "--trace_sample_ratio", "0"});
  ASSERT_TRUE(d.ok()) << d.status();
  auto stub = (*d)->Stub();
  ASSERT_TRUE(Stream(stub.get(), TextRequest(kPrompt, 8)).status.ok());
  // A sampled parent from the client wins over the ratio.
  const std::string traceparent = absl::StrCat("00-", kClientTrace, "-", kClientSpan, "-01");
  ASSERT_TRUE(Stream(stub.get(), TextRequest(kPrompt, 8), {{"traceparent", traceparent}}).status.ok());
  StopAll(d->get());
  std::set<std::string> traces;
  for (const auto& s : receiver.spans()) traces.insert(Hex(s.span.trace_id()));
  EXPECT_EQ(traces, std::set<std::string>{kClientTrace});
}

TEST_F(ObservabilityTest, EveryServiceServesPrometheusMetrics) {
  auto d = Deployment::Start({"--metrics_port", "0"});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_FALSE((*d)->coordinator->metrics().empty());
  auto stub = (*d)->Stub();
  StreamResult r = Stream(stub.get(), TextRequest(kPrompt, 20));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  v1::GenerateRequest bad = TextRequest(kPrompt, 4, "no-such-drafter");
  ASSERT_EQ(Stream(stub.get(), bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Sequences are released just after their last chunk.
  EXPECT_TRUE(Eventually(
      [&] {
        return MetricValue(ScrapeMetrics((*d)->coordinator->metrics()), "treespec_live_sequences") ==
                   0 &&
               MetricValue(ScrapeMetrics((*d)->worker->metrics()), "treespec_worker_sequences") ==
                   0 &&
               MetricValue(ScrapeMetrics((*d)->drafter->metrics()), "treespec_drafter_sequences") ==
                   0;
      },
      std::chrono::milliseconds(5000)));
  const std::string c = ScrapeMetrics((*d)->coordinator->metrics());
  EXPECT_NE(c.find("# TYPE treespec_request_ttft_seconds histogram"), std::string::npos) << c;
  EXPECT_EQ(MetricValue(c, "treespec_requests_total{code=\"OK\"}"), 1);
  EXPECT_EQ(MetricValue(c, "treespec_requests_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(MetricValue(c, "treespec_requests_finished_total{reason=\"length\"}"), 1);
  EXPECT_EQ(MetricValue(c, "treespec_request_ttft_seconds_count{drafter=\"mamba\"}"), 1);
  EXPECT_EQ(MetricValue(c, "treespec_request_tpot_seconds_count{drafter=\"mamba\"}"), 1);
  EXPECT_EQ(MetricValue(c, "treespec_request_e2e_seconds_count{drafter=\"mamba\"}"), 1);
  // Per-token ITL: n tokens give n - 1 samples whatever the chunking.
  EXPECT_EQ(MetricValue(c, "treespec_request_itl_seconds_count{drafter=\"mamba\"}"), 19);
  EXPECT_EQ(MetricValue(c, "treespec_completion_tokens_total{drafter=\"mamba\"}"), 20);
  EXPECT_EQ(MetricValue(c, "treespec_queue_depth"), 0);
  EXPECT_EQ(MetricValue(c, "treespec_live_sequences"), 0);
  const v1::SpeculationStats& sp = r.final_chunk.speculation();
  // One sequence: every Draft RPC drafted it (steps whose budget left no room
  // for a draft are plain steps).
  const double drafts = MetricSum(c, "treespec_spec_drafts_total");
  EXPECT_GT(drafts, 0);
  EXPECT_LE(drafts, sp.steps());
  EXPECT_EQ(MetricSum(c, "treespec_spec_draft_tokens_total"), sp.drafted_tokens());
  EXPECT_EQ(MetricSum(c, "treespec_spec_accepted_tokens_total"), sp.accepted_tokens());
  EXPECT_EQ(MetricSum(c, "treespec_spec_accepted_by_depth_total"), sp.accepted_tokens());

  const std::string w = ScrapeMetrics((*d)->worker->metrics());
  EXPECT_EQ(MetricValue(w, "treespec_worker_step_seconds_count{phase=\"verify\"}"), sp.steps());
  EXPECT_EQ(MetricValue(w, "treespec_worker_step_seconds_count{phase=\"prefill\"}"), 1);
  EXPECT_EQ(MetricValue(w, "treespec_worker_sequences"), 0);
  EXPECT_EQ(MetricValue(w, "treespec_worker_kv_blocks{state=\"used\"}"), 0);
  EXPECT_GT(MetricValue(w, "treespec_worker_kv_blocks{state=\"free\"}"), 0);

  const std::string dr = ScrapeMetrics((*d)->drafter->metrics());
  EXPECT_EQ(MetricValue(dr, "treespec_drafter_step_seconds_count{phase=\"draft\"}"), drafts);
  EXPECT_EQ(MetricValue(dr, "treespec_drafter_sequences"), 0);
  EXPECT_GT(MetricValue(dr, "treespec_drafter_state_slots{state=\"free\"}"), 0);
}

}  // namespace
}  // namespace treespec::testing
