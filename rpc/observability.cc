#include "rpc/observability.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "obs/otlp.h"
#include "rpc/server_telemetry.h"

ABSL_FLAG(int32_t, metrics_port, -1,
          "Port of the Prometheus /metrics HTTP endpoint, on the host of --listen "
          "(0: any free port, printed as 'metrics on HOST:PORT'; -1: off)");
ABSL_FLAG(int32_t, health_port, -1,
          "Plaintext gRPC port serving only grpc.health.v1, for probes when --listen uses TLS "
          "(0: any free port, printed as 'health on HOST:PORT'; -1: off)");
ABSL_FLAG(std::string, otlp_endpoint, "",
          "OTLP/HTTP trace collector, e.g. http://otel-collector:4318 (spans are POSTed to "
          "/v1/traces); empty: tracing off");
ABSL_FLAG(double, trace_sample_ratio, 1.0,
          "Fraction of new traces sampled; calls that carry a traceparent follow its flag");
ABSL_FLAG(int32_t, trace_queue_size, 8192,
          "Finished spans buffered for export; spans beyond it are dropped and counted");
ABSL_FLAG(std::string, service_name, "",
          "service.name of this process's traces (default: the binary's name)");

namespace treespec {
namespace {

std::string HostOf(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  return host.empty() ? "0.0.0.0" : host;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// OTEL_RESOURCE_ATTRIBUTES="k=v,k=v" (values are not percent-decoded).
std::vector<Attribute> EnvResource() {
  std::vector<Attribute> out;
  const char* env = std::getenv("OTEL_RESOURCE_ATTRIBUTES");
  if (env == nullptr) return out;
  for (absl::string_view kv : absl::StrSplit(env, ',', absl::SkipEmpty())) {
    std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.size() == 2 && !p[0].empty()) out.push_back({p[0], p[1]});
  }
  return out;
}


}  // namespace

absl::Status ObservabilityOptions::Validate() const {
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port: ", metrics_port, " is not -1 or a port 0-65535"));
  }
  if (health_port < -1 || health_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health_port: ", health_port, " is not -1 or a port 0-65535"));
  }
  if (!(trace_sample_ratio >= 0.0 && trace_sample_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_sample_ratio: ", trace_sample_ratio, " is not in [0, 1]"));
  }
  if (trace_queue_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_queue_size: ", trace_queue_size, " must be >= 1"));
  }
  if (service_name.empty()) return absl::InvalidArgumentError("--service_name must not be empty");
  return absl::OkStatus();
}

ObservabilityOptions ObservabilityOptions::FromFlags(const std::string& default_service_name,
                                                     const std::string& listen, int rank) {
  ObservabilityOptions o;
  o.service_name = absl::GetFlag(FLAGS_service_name);
  if (o.service_name.empty()) o.service_name = default_service_name;
  o.host = HostOf(listen);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.health_port = absl::GetFlag(FLAGS_health_port);
  o.otlp_endpoint = absl::GetFlag(FLAGS_otlp_endpoint);
  o.trace_sample_ratio = absl::GetFlag(FLAGS_trace_sample_ratio);
  o.trace_queue_size = absl::GetFlag(FLAGS_trace_queue_size);
  o.rank = rank;
  return o;
}

absl::StatusOr<std::unique_ptr<ServiceObservability>> ServiceObservability::Start(
    ObservabilityOptions options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  auto o = std::unique_ptr<ServiceObservability>(new ServiceObservability());
  o->options_ = options;
  MetricsRegistry& r = o->registry_;
  o->rpc_seconds_ = r.AddHistogram("treespec_rpc_server_seconds",
                                   "Time to handle a gRPC call, by method", StepBuckets(),
                                   {"method"});
  o->rpc_calls_ = r.AddCounter("treespec_rpc_server_calls_total",
                               "gRPC calls handled, by method and status code", {"method", "code"});
  const auto start = std::chrono::system_clock::now();
  r.AddGaugeCallback("process_start_time_seconds", "Start time of the process since the Unix epoch",
                     [start] { return std::chrono::duration<double>(start.time_since_epoch()).count(); });
  if (!options.otlp_endpoint.empty()) {
    auto exporter = OtlpHttpExporter::Create(options.otlp_endpoint);
    if (!exporter.ok()) return exporter.status();
    TracerOptions t;
    t.service_name = options.service_name;
    t.sample_ratio = options.trace_sample_ratio;
    t.queue_capacity = static_cast<size_t>(options.trace_queue_size);
    const std::string host = Hostname();
    t.resource.push_back({"service.instance.id", absl::StrCat(host, ":", getpid())});
    t.resource.push_back({"host.name", host});
    if (options.rank >= 0) t.resource.push_back({"treespec.rank", static_cast<int64_t>(options.rank)});
    for (Attribute& a : EnvResource()) t.resource.push_back(std::move(a));
    o->tracer_ = std::make_unique<Tracer>(std::move(t), std::move(*exporter));
    Tracer* tracer = o->tracer_.get();
    r.AddCounterCallback("treespec_trace_spans_exported_total", "Spans the OTLP collector accepted",
                         [tracer] { return static_cast<double>(tracer->stats().exported); });
    r.AddCounterCallback("treespec_trace_spans_dropped_total",
                         "Spans dropped because the export queue was full",
                         [tracer] { return static_cast<double>(tracer->stats().dropped); });
    r.AddCounterCallback("treespec_trace_export_failures_total", "Failed OTLP export calls",
                         [tracer] { return static_cast<double>(tracer->stats().export_failures); });
  }
  if (options.health_port >= 0) {
    auto h = HealthPort::Start(options.host, options.health_port);
    if (!h.ok()) return h.status();
    o->health_ = std::move(*h);
    std::printf("health on %s\n", o->health_->address().c_str());
  }
  if (options.metrics_port >= 0) {
    auto m = MetricsServer::Start(options.host, options.metrics_port, &o->registry_);
    if (!m.ok()) return m.status();
    o->metrics_ = std::move(*m);
    std::printf("metrics on %s\n", o->metrics_->address().c_str());
  }
  std::fflush(stdout);
  return o;
}

ServiceObservability::~ServiceObservability() { Shutdown(std::chrono::seconds(2)); }

void ServiceObservability::TimeMethod(const std::string& method, Histogram* histogram) {
  method_histograms_[method] = histogram;
}

void ServiceObservability::Untraced(const std::string& method) { untraced_.insert(method); }

void ServiceObservability::WatchHealth(std::function<bool()> is_broken) {
  if (health_ == nullptr || watchdog_.joinable()) return;
  watchdog_ = std::thread([this, is_broken = std::move(is_broken)] {
    while (true) {
      {
        absl::MutexLock lock(&watchdog_mu_);
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchdog_mu_) { return watchdog_stop_; };
        if (watchdog_mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Seconds(1))) return;
      }
      if (is_broken()) health_->SetBroken();
    }
  });
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServiceObservability::Interceptors(std::set<std::string> untraced,
                                   std::set<std::string> stream_methods) {
  ServerTelemetryOptions t = TelemetryOptions(std::move(untraced));
  t.skipped = std::move(stream_methods);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(MakeServerTelemetry(std::move(t)));
  return out;
}

StreamCallRecorder ServiceObservability::StreamCalls(std::set<std::string> untraced) {
  return MakeStreamCallTelemetry(TelemetryOptions(std::move(untraced)));
}

ServerTelemetryOptions ServiceObservability::TelemetryOptions(std::set<std::string> untraced) const {
  ServerTelemetryOptions t;
  t.rpc_seconds = rpc_seconds_;
  t.rpc_calls = rpc_calls_;
  t.method_histograms = method_histograms_;
  t.tracer = tracer_.get();
  t.untraced = std::move(untraced);
  t.untraced.insert(untraced_.begin(), untraced_.end());
  return t;
}

void ServiceObservability::SetServing(bool serving) {
  if (health_ != nullptr) health_->SetServing(serving);
}

void ServiceObservability::Shutdown(std::chrono::milliseconds flush_timeout) {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&watchdog_mu_);
    watchdog_stop_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  if (tracer_ != nullptr) tracer_->Shutdown(flush_timeout);
  if (health_ != nullptr) health_->Shutdown();
  if (metrics_ != nullptr) metrics_->Stop();
}

}  // namespace treespec
