#include "obs/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

// Registration mistakes are programmer errors (STYLE.md 6).
void Require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "metrics registry: %s\n", what.c_str());
  std::abort();
}

bool ValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (allow_colon && c == ':');
    if (alpha || (i > 0 && c >= '0' && c <= '9')) continue;
    return false;
  }
  return true;
}

std::string EscapeHelp(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}` plus an optional extra label (histogram `le`); empty when
// there are no labels at all.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     absl::string_view extra_name = {}, absl::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(i < values.size() ? values[i] : ""),
                    "\"");
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    absl::StrAppend(&out, extra_name, "=\"", extra_value, "\"");
  }
  out += '}';
  return out;
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string EscapeLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------- histogram

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  Require(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must be sorted");
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Prometheus buckets are upper-inclusive: v lands in the first bound >= v.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void Histogram::ObserveZeros(uint64_t n) {
  if (n == 0) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), 0.0) - bounds_.begin();
  counts_[i].fetch_add(n, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.count += s.counts[i];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> StepBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
}

// ---------------------------------------------------------------- registry

MetricsRegistry::Entry* MetricsRegistry::NewEntry(MetricType type, const std::string& name,
                                                  const std::string& help,
                                                  const std::vector<std::string>& label_names) {
  Require(ValidName(name, /*allow_colon=*/true), absl::StrCat("bad metric name '", name, "'"));
  for (const std::string& l : label_names) {
    Require(ValidName(l, /*allow_colon=*/false) && l != "le" && l.rfind("__", 0) != 0,
            absl::StrCat("bad label name '", l, "' in ", name));
  }
  for (const auto& e : entries_) {
    Require(e->name != name, absl::StrCat("metric '", name, "' registered twice"));
  }
  auto e = std::make_unique<Entry>();
  e->type = type;
  e->name = name;
  e->help = help;
  entries_.push_back(std::move(e));
  return entries_.back().get();
}

CounterFamily* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                           std::vector<std::string> label_names,
                                           size_t max_series) {
  absl::MutexLock lock(&mu_);
  Entry* e = NewEntry(MetricType::kCounter, name, help, label_names);
  e->counter = std::make_unique<CounterFamily>(name, std::move(label_names), max_series,
                                               [] { return std::make_unique<Counter>(); });
  return e->counter.get();
}

GaugeFamily* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names, size_t max_series) {
  absl::MutexLock lock(&mu_);
  Entry* e = NewEntry(MetricType::kGauge, name, help, label_names);
  e->gauge = std::make_unique<GaugeFamily>(name, std::move(label_names), max_series,
                                           [] { return std::make_unique<Gauge>(); });
  return e->gauge.get();
}

HistogramFamily* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                               std::vector<double> bounds,
                                               std::vector<std::string> label_names,
                                               size_t max_series) {
  absl::MutexLock lock(&mu_);
  Entry* e = NewEntry(MetricType::kHistogram, name, help, label_names);
  e->histogram = std::make_unique<HistogramFamily>(
      name, std::move(label_names), max_series,
      [bounds = std::move(bounds)] { return std::make_unique<Histogram>(bounds); });
  return e->histogram.get();
}

void MetricsRegistry::AddGaugeCallback(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names,
                                       std::function<std::vector<GaugeSample>()> fn) {
  absl::MutexLock lock(&mu_);
  Entry* e = NewEntry(MetricType::kGauge, name, help, label_names);
  e->callback_labels = std::move(label_names);
  e->callback = std::move(fn);
}

void MetricsRegistry::AddGaugeCallback(const std::string& name, const std::string& help,
                                       std::function<double()> fn) {
  AddGaugeCallback(name, help, {}, [fn = std::move(fn)] {
    return std::vector<GaugeSample>{{{}, fn()}};
  });
}

void MetricsRegistry::AddCounterCallback(const std::string& name, const std::string& help,
                                         std::function<double()> fn) {
  absl::MutexLock lock(&mu_);
  Entry* e = NewEntry(MetricType::kCounter, name, help, {});
  e->callback = [fn = std::move(fn)] { return std::vector<GaugeSample>{{{}, fn()}}; };
}

std::string MetricsRegistry::Render() const {
  std::vector<const Entry*> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& e : entries_) entries.push_back(e.get());
  }
  // Entries are never removed, so the pointers stay valid without the lock
  // (callbacks may take their own locks).
  std::string out;
  for (const Entry* e : entries) {
    absl::StrAppend(&out, "# HELP ", e->name, " ", EscapeHelp(e->help), "\n# TYPE ", e->name, " ",
                    TypeName(e->type), "\n");
    if (e->counter != nullptr) {
      for (const auto& [labels, c] : e->counter->Children()) {
        absl::StrAppend(&out, e->name, LabelSet(e->counter->label_names(), labels), " ",
                        c->value(), "\n");
      }
    } else if (e->gauge != nullptr) {
      for (const auto& [labels, g] : e->gauge->Children()) {
        absl::StrAppend(&out, e->name, LabelSet(e->gauge->label_names(), labels), " ",
                        FormatMetricValue(g->value()), "\n");
      }
    } else if (e->histogram != nullptr) {
      const std::vector<std::string>& names = e->histogram->label_names();
      for (const auto& [labels, h] : e->histogram->Children()) {
        Histogram::Snapshot s = h->snapshot();
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          cumulative += s.counts[i];
          const std::string le = i < s.bounds.size() ? FormatMetricValue(s.bounds[i]) : "+Inf";
          absl::StrAppend(&out, e->name, "_bucket", LabelSet(names, labels, "le", le), " ",
                          cumulative, "\n");
        }
        absl::StrAppend(&out, e->name, "_sum", LabelSet(names, labels), " ",
                        FormatMetricValue(s.sum), "\n", e->name, "_count",
                        LabelSet(names, labels), " ", s.count, "\n");
      }
    } else if (e->callback) {
      for (const GaugeSample& g : e->callback()) {
        absl::StrAppend(&out, e->name, LabelSet(e->callback_labels, g.label_values), " ",
                        FormatMetricValue(g.value), "\n");
      }
    }
  }
  return out;
}

}  // namespace treespec
