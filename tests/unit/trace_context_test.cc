// W3C traceparent parsing and formatting, id generation, the tracer's
// sampling, bounded queue and flush (obs/trace_context.h, obs/tracer.h), and
// the OTLP encoding (obs/otlp.h) read back with the official field numbers.
#include "obs/trace_context.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "obs/otlp.h"
#include "obs/tracer.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace treespec {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceparentTest, ParsesTheSpecExample) {
  std::optional<SpanContext> c = ParseTraceparent(kValid);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(HexId(c->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(c->span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(c->sampled());
  EXPECT_EQ(FormatTraceparent(*c), kValid);
}

TEST(TraceparentTest, RejectsInvalidHeaders) {
  const char* bad[] = {
      "",
      "garbage",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",         // no flags
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",      // uppercase
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",      // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",      // zero span id
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",      // version ff
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",   // v00 with extra
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",      // not hex
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",      // bad separator
  };
  for (const char* h : bad) EXPECT_FALSE(ParseTraceparent(h).has_value()) << "'" << h << "'";
}

TEST(TraceparentTest, FutureVersionsMayAppendFields) {
  EXPECT_TRUE(
      ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra").has_value());
  EXPECT_FALSE(
      ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00extra").has_value());
}

TEST(TraceparentTest, LinksRoundTripAndSkipInvalidEntries) {
  SpanContext a = *ParseTraceparent(kValid);
  SpanContext b;
  b.trace_id = NewTraceId();
  b.span_id = NewSpanId();
  const std::string header = FormatTraceLinks({a, b});
  std::vector<SpanContext> back = ParseTraceLinks(header + ",nonsense");
  ASSERT_EQ(back.size(), 2u) << header;
  EXPECT_EQ(back[0], a);
  EXPECT_EQ(back[1], b);
}

TEST(TraceparentTest, OutgoingScopesNest) {
  EXPECT_EQ(CurrentOutgoingTrace(), nullptr);
  SpanContext a = *ParseTraceparent(kValid);
  {
    OutgoingTraceScope outer({a, {}});
    ASSERT_NE(CurrentOutgoingTrace(), nullptr);
    SpanContext b = a;
    b.span_id = NewSpanId();
    {
      OutgoingTraceScope inner({b, {}});
      EXPECT_EQ(CurrentOutgoingTrace()->parent, b);
    }
    EXPECT_EQ(CurrentOutgoingTrace()->parent, a);
    std::thread([] { EXPECT_EQ(CurrentOutgoingTrace(), nullptr); }).join();
  }
  EXPECT_EQ(CurrentOutgoingTrace(), nullptr);
}

// Collects exported spans; Export blocks while `gate` is closed.
class MemoryExporter : public SpanExporter {
 public:
  absl::Status Export(const std::vector<Attribute>& resource,
                      const std::vector<SpanData>& spans) override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
    for (const SpanData& s : spans) spans_.push_back(s);
    resource_ = resource;
    return absl::OkStatus();
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  std::vector<SpanData> spans() {
    absl::MutexLock lock(&mu_);
    return spans_;
  }
  std::vector<Attribute> resource() {
    absl::MutexLock lock(&mu_);
    return resource_;
  }
  absl::Mutex mu_;
  bool open_ = true;
  std::vector<SpanData> spans_;
  std::vector<Attribute> resource_;
};

SpanData Span(const SpanContext& ctx, const std::string& name) {
  SpanData s;
  s.context = ctx;
  s.name = name;
  return s;
}

TEST(TracerTest, ChildrenFollowTheParentsSamplingDecision) {
  TracerOptions o;
  o.sample_ratio = 0.0;
  Tracer tracer(o, nullptr);
  SpanContext root = tracer.NewContext({});
  EXPECT_TRUE(root.valid());
  EXPECT_FALSE(root.sampled());
  SpanContext sampled_parent = *ParseTraceparent(kValid);
  SpanContext child = tracer.NewContext(sampled_parent);
  EXPECT_TRUE(child.sampled());
  EXPECT_EQ(child.trace_id, sampled_parent.trace_id);
  EXPECT_NE(child.span_id, sampled_parent.span_id);
}

TEST(TracerTest, RatioSamplesAboutThatFraction) {
  TracerOptions o;
  o.sample_ratio = 0.25;
  Tracer tracer(o, nullptr);
  int sampled = 0;
  for (int i = 0; i < 20000; ++i) sampled += tracer.NewContext({}).sampled();
  EXPECT_NEAR(sampled / 20000.0, 0.25, 0.02);
}

TEST(TracerTest, FullQueueDropsAndCountsWithoutBlocking) {
  auto exporter = std::make_unique<MemoryExporter>();
  MemoryExporter* mem = exporter.get();
  mem->open_ = false;  // the export thread blocks on its first batch
  TracerOptions o;
  o.queue_capacity = 4;
  o.max_batch = 1;
  o.flush_interval = std::chrono::milliseconds(1);
  Tracer tracer(o, std::move(exporter));
  SpanContext ctx = tracer.NewContext({});
  tracer.Record(Span(ctx, "first"));  // taken by the (blocked) export thread
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) tracer.Record(Span(ctx, "x"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(tracer.stats().dropped, 6u);
  mem->Open();
  EXPECT_TRUE(tracer.Flush(std::chrono::seconds(5)));
  EXPECT_EQ(mem->spans().size(), 5u);
  EXPECT_EQ(tracer.stats().exported, 5u);
}

TEST(TracerTest, ShutdownFlushesQueuedSpans) {
  auto exporter = std::make_unique<MemoryExporter>();
  MemoryExporter* mem = exporter.get();
  TracerOptions o;
  o.service_name = "svc";
  o.flush_interval = std::chrono::seconds(60);  // only the shutdown flush sends
  o.resource.push_back({"treespec.rank", int64_t{1}});
  Tracer tracer(o, std::move(exporter));
  SpanContext ctx = tracer.NewContext({});
  for (int i = 0; i < 3; ++i) tracer.Record(Span(ctx, "s"));
  tracer.Shutdown(std::chrono::seconds(5));
  EXPECT_EQ(mem->spans().size(), 3u);
  std::vector<Attribute> res = mem->resource();
  ASSERT_GE(res.size(), 1u);
  EXPECT_EQ(res[0].key, "service.name");
  EXPECT_EQ(std::get<std::string>(res[0].value), "svc");
  tracer.Record(Span(ctx, "late"));
  EXPECT_EQ(tracer.stats().dropped, 1u);
}

TEST(OtlpTest, EncodingUsesTheOfficialMessages) {
  SpanData s;
  s.context = *ParseTraceparent(kValid);
  s.parent_span_id = NewSpanId();
  s.name = "verify";
  s.kind = SpanKind::kClient;
  s.start_unix_ns = 1000;
  s.end_unix_ns = 2500;
  s.Add("treespec.accepted", int64_t{3});
  s.Add("treespec.tree", std::string("3,2,1"));
  s.events.push_back({1500, "draft", {{"ok", true}}});
  s.links.push_back(*ParseTraceparent(kValid));
  s.status = SpanStatus::kError;
  s.status_message = "UNAVAILABLE";
  const std::string bytes = EncodeOtlpTraces({{"service.name", std::string("w")}}, {s});
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  ASSERT_EQ(req.resource_spans_size(), 1);
  const auto& rs = req.resource_spans(0);
  EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rs.resource().attributes(0).value().string_value(), "w");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 1);
  const auto& o = rs.scope_spans(0).spans(0);
  EXPECT_EQ(o.trace_id(), std::string(reinterpret_cast<const char*>(s.context.trace_id.data()), 16));
  EXPECT_EQ(o.parent_span_id().size(), 8u);
  EXPECT_EQ(o.name(), "verify");
  EXPECT_EQ(o.kind(), opentelemetry::proto::trace::v1::Span::SPAN_KIND_CLIENT);
  EXPECT_EQ(o.start_time_unix_nano(), 1000u);
  EXPECT_EQ(o.end_time_unix_nano(), 2500u);
  EXPECT_EQ(o.attributes(0).value().int_value(), 3);
  EXPECT_EQ(o.events(0).name(), "draft");
  EXPECT_EQ(o.links_size(), 1);
  EXPECT_EQ(o.status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(o.flags(), 1u);
}

TEST(OtlpTest, EndpointSpellings) {
  auto a = ParseOtlpEndpoint("http://collector:4318");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheme_host_port, "http://collector:4318");
  EXPECT_EQ(a->path, "/v1/traces");
  auto b = ParseOtlpEndpoint("collector:4318");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme_host_port, "http://collector:4318");
  auto c = ParseOtlpEndpoint("https://x.example/otlp/v1/traces");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->path, "/otlp/v1/traces");
  EXPECT_FALSE(ParseOtlpEndpoint("ftp://x:1").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http:///v1/traces").ok());
}

}  // namespace
}  // namespace treespec
