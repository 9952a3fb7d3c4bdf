// The lane's telemetry without gRPC (coordinator/lane_telemetry.h): which
// context a batched RPC carries, the spans and links it records, fallback
// reasons, speculative counters and accepted-by-depth.
#include "coordinator/lane_telemetry.h"

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

class MemoryExporter : public SpanExporter {
 public:
  explicit MemoryExporter(std::vector<SpanData>* out) : out_(out) {}
  absl::Status Export(const std::vector<Attribute>&, const std::vector<SpanData>& spans) override {
    out_->insert(out_->end(), spans.begin(), spans.end());
    return absl::OkStatus();
  }

 private:
  std::vector<SpanData>* out_;
};

struct FakeSeq {
  SeqTelemetry tel;
};

class LaneTelemetryTest : public ::testing::Test {
 protected:
  void Start(StepTracing steps) {
    tracer_ = std::make_unique<Tracer>(TracerOptions{}, std::make_unique<MemoryExporter>(&spans_));
    telemetry_ = std::make_unique<CoordinatorTelemetry>(&registry_, tracer_.get(), steps);
  }
  // A sequence whose request's generate span is sampled or not.
  FakeSeq* Add(bool sampled) {
    GenerationRequest g;
    g.drafter = "mamba";
    SpanContext parent = tracer_->NewContext({});
    parent.flags = sampled ? 1 : 0;
    reqs_.push_back(std::make_shared<RequestState>(g, Clock::now(), std::nullopt, parent));
    seqs_.push_back(std::make_unique<FakeSeq>());
    seqs_.back()->tel.Admit(telemetry_.get(), *reqs_.back(), Clock::now());
    return seqs_.back().get();
  }
  std::vector<SpanData> Spans(const std::string& name) {
    tracer_->Flush(std::chrono::seconds(5));
    std::vector<SpanData> out;
    for (const SpanData& s : spans_) {
      if (s.name == name) out.push_back(s);
    }
    return out;
  }

  MetricsRegistry registry_;
  std::vector<SpanData> spans_;  // written by the tracer's thread; read after Flush
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<CoordinatorTelemetry> telemetry_;
  std::vector<std::shared_ptr<RequestState>> reqs_;
  std::vector<std::unique_ptr<FakeSeq>> seqs_;
};

TEST_F(LaneTelemetryTest, BatchCarriesTheFirstSampledSpanAndLinksTheOthers) {
  Start(StepTracing::kSpans);
  Add(false);
  FakeSeq* a = Add(true);
  FakeSeq* b = Add(true);
  OutgoingTrace seen;
  {
    BatchRpcTrace trace(telemetry_.get(), "verify", seqs_);
    ASSERT_NE(CurrentOutgoingTrace(), nullptr);
    seen = *CurrentOutgoingTrace();
    trace.End(absl::OkStatus());
    EXPECT_EQ(CurrentOutgoingTrace(), nullptr) << "End removes the outgoing context";
    a->tel.OnVerify(10, 3, "3,2,1");
    b->tel.OnVerify(1, 0, "");
  }
  std::vector<SpanData> verify = Spans("verify");
  ASSERT_EQ(verify.size(), 2u) << "one span per sampled sequence";
  EXPECT_EQ(seen.parent, verify[0].context);
  ASSERT_EQ(seen.links.size(), 1u);
  EXPECT_EQ(seen.links[0], verify[1].context);
  EXPECT_EQ(verify[0].parent_span_id, reqs_[1]->trace().span_id);
  EXPECT_EQ(verify[0].kind, SpanKind::kClient);
  bool have_accepted = false;
  for (const Attribute& at : verify[0].attributes) {
    if (at.key == "treespec.accepted") have_accepted = std::get<int64_t>(at.value) == 3;
  }
  EXPECT_TRUE(have_accepted);
}

TEST_F(LaneTelemetryTest, UnsampledBatchPropagatesItsDecision) {
  Start(StepTracing::kSpans);
  Add(false);
  BatchRpcTrace trace(telemetry_.get(), "draft", seqs_);
  ASSERT_NE(CurrentOutgoingTrace(), nullptr);
  EXPECT_FALSE(CurrentOutgoingTrace()->parent.sampled());
  EXPECT_EQ(CurrentOutgoingTrace()->parent, reqs_[0]->trace());
  trace.End(absl::OkStatus());
}

TEST_F(LaneTelemetryTest, NoTelemetryIsANoOp) {
  Start(StepTracing::kSpans);
  Add(true);
  BatchRpcTrace trace(nullptr, "verify", seqs_);
  EXPECT_EQ(CurrentOutgoingTrace(), nullptr);
  trace.End(absl::OkStatus());
}

TEST_F(LaneTelemetryTest, EventsModeCarriesTheDecodeSpan) {
  Start(StepTracing::kEvents);
  FakeSeq* a = Add(true);
  {
    BatchRpcTrace trace(telemetry_.get(), "draft", seqs_);
    trace.End(absl::OkStatus());
    a->tel.OnDraft("2,2", 7);
  }
  OutgoingTrace seen;
  {
    BatchRpcTrace trace(telemetry_.get(), "verify", seqs_);
    seen = *CurrentOutgoingTrace();
    trace.End(absl::OkStatus());
    a->tel.OnVerify(7, 2, "2,2");
  }
  a->tel.Finish(absl::OkStatus());
  EXPECT_TRUE(Spans("draft").empty());
  std::vector<SpanData> decode = Spans("decode");
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_EQ(seen.parent, decode[0].context);
  ASSERT_EQ(decode[0].events.size(), 2u);
  EXPECT_EQ(decode[0].events[0].name, "draft");
  EXPECT_EQ(decode[0].events[1].name, "verify");
}

TEST_F(LaneTelemetryTest, FallbackReasonsAndAcceptedByDepth) {
  Start(StepTracing::kOff);
  FakeSeq* s = Add(true);
  // Drafter not open: no draft RPC for the sequence this step.
  s->tel.OnFallback();
  s->tel.OnVerify(1, 0, "");
  // The draft RPC failed.
  {
    BatchRpcTrace trace(telemetry_.get(), "draft", seqs_);
    trace.End(absl::UnavailableError("down"));
  }
  s->tel.OnFallback();
  s->tel.OnVerify(1, 0, "");
  // A tree came back: 3 of 4 levels accepted, then 1.
  {
    BatchRpcTrace trace(telemetry_.get(), "draft", seqs_);
    trace.End(absl::OkStatus());
    s->tel.OnDraft("2,1,1,1", 9);
  }
  s->tel.OnVerify(9, 3, "2,1,1,1");
  s->tel.OnVerify(9, 1, "2,1,1,1");
  const std::string text = registry_.Render();
  auto has = [&](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("treespec_spec_fallback_steps_total{drafter=\"mamba\",reason=\"drafter_unavailable\"} 1"))
      << text;
  EXPECT_TRUE(has("treespec_spec_fallback_steps_total{drafter=\"mamba\",reason=\"draft_rpc_failed\"} 1"));
  EXPECT_TRUE(has("treespec_spec_drafts_total{drafter=\"mamba\",tree=\"2,1,1,1\"} 2"));
  EXPECT_TRUE(has("treespec_spec_draft_tokens_total{drafter=\"mamba\",tree=\"2,1,1,1\"} 16"));
  EXPECT_TRUE(has("treespec_spec_accepted_tokens_total{drafter=\"mamba\",tree=\"2,1,1,1\"} 4"));
  EXPECT_TRUE(has("treespec_spec_accepted_by_depth_total{drafter=\"mamba\",tree=\"2,1,1,1\",depth=\"1\"} 2"));
  EXPECT_TRUE(has("treespec_spec_accepted_by_depth_total{drafter=\"mamba\",tree=\"2,1,1,1\",depth=\"3\"} 1"));
  EXPECT_TRUE(has("treespec_lane_batch_size_count{rpc=\"draft\"} 2"));
}

TEST_F(LaneTelemetryTest, PredraftHitsMissesAndTimeSaved) {
  Start(StepTracing::kOff);
  FakeSeq* s = Add(false);
  s->tel.OnPredraft(true, 0.002);
  s->tel.OnPredraft(true, 0.003);
  s->tel.OnPredraft(false, 0.0);
  const std::string text = registry_.Render();
  auto has = [&](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("treespec_spec_predraft_steps_total{drafter=\"mamba\",outcome=\"hit\"} 2"))
      << text;
  EXPECT_TRUE(has("treespec_spec_predraft_steps_total{drafter=\"mamba\",outcome=\"miss\"} 1"));
  EXPECT_TRUE(has("treespec_spec_predraft_saved_seconds_count{drafter=\"mamba\"} 2"));
  EXPECT_TRUE(has("treespec_spec_predraft_saved_seconds_sum{drafter=\"mamba\"} 0.005")) << text;
}

}  // namespace
}  // namespace treespec
