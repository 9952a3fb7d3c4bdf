// A small Prometheus metrics registry: counters, gauges and histograms with
// labels, rendered in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// A metric family (one name, one help text, fixed label names) hands out one
// child per label-value tuple. Looking a child up takes the family's mutex;
// updating it is one or two relaxed atomic operations, so hot paths look their
// children up once and keep the pointers (children live as long as the
// registry). Callback gauges are evaluated only when the registry is rendered
// (scrape time), which keeps their sources' locks off the hot path.
//
// A family holds at most `max_series` children; further label tuples share
// one child whose label values are all "other", so an unexpected label value
// (say, a tree shape sent by a client) cannot grow memory without bound.
//
// Thread-safe: everything may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace treespec {

class Counter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Cumulative histogram over fixed upper bounds (seconds, tokens, ...).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Adds `n` observations of 0 (e.g. the zero inter-token gaps of a chunk).
  void ObserveZeros(uint64_t n);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket, not cumulative; last = +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// Latency buckets in seconds, 1 ms … 60 s.
std::vector<double> LatencyBuckets();
// Finer buckets in seconds for per-token and per-step times, 0.1 ms … 10 s.
std::vector<double> StepBuckets();
// `count` bounds start, start·factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

template <typename T>
class MetricFamily {
 public:
  MetricFamily(std::string name, std::vector<std::string> label_names, size_t max_series,
               std::function<std::unique_ptr<T>()> make)
      : name_(std::move(name)),
        label_names_(std::move(label_names)),
        max_series_(max_series),
        make_(std::move(make)) {}

  // The child for `values` (one per label name, in order). Never null; the
  // pointer stays valid as long as the registry.
  T* WithLabels(const std::vector<std::string>& values);
  // The child of a family without labels.
  T* Get() { return WithLabels({}); }

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Children in label order (rendering).
  std::vector<std::pair<std::vector<std::string>, const T*>> Children() const;

 private:
  const std::string name_;
  const std::vector<std::string> label_names_;
  const size_t max_series_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

struct GaugeSample {
  std::vector<std::string> label_values;
  double value = 0;
};

class MetricsRegistry {
 public:
  static constexpr size_t kDefaultMaxSeries = 256;

  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and be unique in the registry;
  // label names [a-zA-Z_][a-zA-Z0-9_]* (programmer errors: CHECK-ed).
  CounterFamily* AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {},
                            size_t max_series = kDefaultMaxSeries);
  GaugeFamily* AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {},
                        size_t max_series = kDefaultMaxSeries);
  HistogramFamily* AddHistogram(const std::string& name, const std::string& help,
                                std::vector<double> bounds,
                                std::vector<std::string> label_names = {},
                                size_t max_series = kDefaultMaxSeries);
  // A gauge family whose samples `fn` returns at render time. `fn` runs on
  // the scraping thread and must not call back into the registry.
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names,
                        std::function<std::vector<GaugeSample>()> fn);
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::function<double()> fn);
  // A counter kept elsewhere (e.g. a tracer's statistics), read at render time.
  void AddCounterCallback(const std::string& name, const std::string& help,
                          std::function<double()> fn);

  // Every family in the text exposition format 0.0.4, in registration order.
  std::string Render() const;

 private:
  struct Entry {
    MetricType type;
    std::string name;
    std::string help;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
    std::vector<std::string> callback_labels;
    std::function<std::vector<GaugeSample>()> callback;
  };
  Entry* NewEntry(MetricType type, const std::string& name, const std::string& help,
                  const std::vector<std::string>& label_names) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// The content type of Render()'s output.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Formats a sample value the way Prometheus parses it: shortest round-trip
// decimal, "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double v);
// Escapes a label value (backslash, double quote, newline).
std::string EscapeLabelValue(absl::string_view v);

// ---------------------------------------------------------------- template

template <typename T>
T* MetricFamily<T>::WithLabels(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(values);
  if (it != children_.end()) return it->second.get();
  std::vector<std::string> key = values;
  key.resize(label_names_.size());
  if (children_.size() >= max_series_ && !label_names_.empty()) {
    key.assign(label_names_.size(), "other");
    auto other = children_.find(key);
    if (other != children_.end()) return other->second.get();
  }
  auto& slot = children_[key];
  if (slot == nullptr) slot = make_();
  return slot.get();
}

template <typename T>
std::vector<std::pair<std::vector<std::string>, const T*>> MetricFamily<T>::Children() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::vector<std::string>, const T*>> out;
  out.reserve(children_.size());
  for (const auto& [k, v] : children_) out.emplace_back(k, v.get());
  return out;
}

}  // namespace treespec
