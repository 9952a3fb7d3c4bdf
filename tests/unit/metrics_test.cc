// The Prometheus registry (obs/metrics.h): exposition format 0.0.4 exactly,
// label escaping, histogram buckets, the series cap, callbacks.
#include "obs/metrics.h"

#include <thread>

#include "gtest/gtest.h"

namespace treespec {
namespace {

TEST(MetricsTest, CounterAndGaugeExposition) {
  MetricsRegistry r;
  CounterFamily* c = r.AddCounter("treespec_test_total", "A test counter", {"code"});
  GaugeFamily* g = r.AddGauge("treespec_test_gauge", "A gauge\nwith a newline");
  c->WithLabels({"OK"})->Inc();
  c->WithLabels({"OK"})->Inc(2);
  c->WithLabels({"UNAVAILABLE"})->Inc();
  g->Get()->Set(1.5);
  EXPECT_EQ(r.Render(),
            "# HELP treespec_test_total A test counter\n"
            "# TYPE treespec_test_total counter\n"
            "treespec_test_total{code=\"OK\"} 3\n"
            "treespec_test_total{code=\"UNAVAILABLE\"} 1\n"
            "# HELP treespec_test_gauge A gauge\\nwith a newline\n"
            "# TYPE treespec_test_gauge gauge\n"
            "treespec_test_gauge 1.5\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry r;
  r.AddCounter("x_total", "x", {"v"})->WithLabels({"a\"b\\c\nd"})->Inc();
  EXPECT_NE(r.Render().find("x_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << r.Render();
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndUpperInclusive) {
  MetricsRegistry r;
  Histogram* h = r.AddHistogram("lat_seconds", "latency", {0.1, 1, 10}, {"drafter"})
                     ->WithLabels({"mamba"});
  h->Observe(0.05);
  h->Observe(0.1);  // le="0.1" includes 0.1
  h->Observe(5);
  h->Observe(100);
  h->ObserveZeros(2);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE lat_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{drafter=\"mamba\",le=\"0.1\"} 4\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("lat_seconds_bucket{drafter=\"mamba\",le=\"1\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{drafter=\"mamba\",le=\"10\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{drafter=\"mamba\",le=\"+Inf\"} 6\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_sum{drafter=\"mamba\"} 105.15\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_count{drafter=\"mamba\"} 6\n"), std::string::npos);
}

TEST(MetricsTest, SeriesCapFoldsIntoOther) {
  MetricsRegistry r;
  CounterFamily* c = r.AddCounter("trees_total", "t", {"tree"}, /*max_series=*/2);
  c->WithLabels({"a"})->Inc();
  c->WithLabels({"b"})->Inc();
  c->WithLabels({"c"})->Inc();
  c->WithLabels({"d"})->Inc();
  c->WithLabels({"a"})->Inc();
  const std::string text = r.Render();
  EXPECT_NE(text.find("trees_total{tree=\"a\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trees_total{tree=\"other\"} 2\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("tree=\"c\""), std::string::npos) << text;
}

TEST(MetricsTest, CallbacksRunAtRenderTime) {
  MetricsRegistry r;
  int calls = 0;
  r.AddGaugeCallback("depth", "queue depth", [&calls] { return static_cast<double>(++calls); });
  r.AddGaugeCallback("kv_blocks", "blocks", {"state"}, [] {
    return std::vector<GaugeSample>{{{"used"}, 3}, {{"free"}, 5}};
  });
  r.AddCounterCallback("dropped_total", "dropped", [] { return 7.0; });
  EXPECT_EQ(calls, 0);
  const std::string text = r.Render();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(text.find("depth 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kv_blocks{state=\"used\"} 3\nkv_blocks{state=\"free\"} 5\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE dropped_total counter\ndropped_total 7\n"), std::string::npos);
}

TEST(MetricsTest, ValuesFormatTheWayPrometheusParsesThem) {
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(1e-5), "1e-05");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatMetricValue(0.0 / 0.0), "NaN");
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  CounterFamily* c = r.AddCounter("n_total", "n", {"t"});
  Histogram* h = r.AddHistogram("h", "h", {1})->Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Counter* mine = c->WithLabels({"x"});
      for (int i = 0; i < 10000; ++i) {
        mine->Inc();
        h->Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->WithLabels({"x"})->value(), 40000u);
  EXPECT_EQ(h->snapshot().count, 40000u);
  EXPECT_DOUBLE_EQ(h->snapshot().sum, 20000.0);
}

}  // namespace
}  // namespace treespec
