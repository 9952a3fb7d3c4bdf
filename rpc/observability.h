// Operations plumbing shared by the service binaries (worker, drafter,
// coordinator): the flags below, the Prometheus /metrics endpoint, the tracer
// with its OTLP exporter, the plaintext health port, and the gRPC server
// interceptor that feeds them.
//
//   --metrics_port       /metrics over HTTP (-1 off, 0 any free port)
//   --health_port        plaintext grpc.health.v1 only (-1 off, 0 any free port)
//   --otlp_endpoint      OTLP/HTTP collector; empty: no tracing
//   --trace_sample_ratio --trace_queue_size --service_name
//
// Ports bind on the host of --listen. Chosen addresses are printed on stdout
// as "metrics on HOST:PORT" and "health on HOST:PORT" (before "listening on").
// Resource attributes of traces: service.name, service.instance.id
// (host:pid), host.name, treespec.rank (workers), plus OTEL_RESOURCE_ATTRIBUTES
// ("k=v,k=v", e.g. k8s.pod.name from the downward API).
//
// Lifecycle in a main(): Start → the service's own telemetry registers its
// gauges, method histograms, untraced methods and health watch here
// (worker/worker_telemetry.h, drafter_service/drafter_telemetry.h,
// coordinator/telemetry.h) → StartServer with Interceptors() →
// SetServing(true) … SIGTERM → SetServing(false) → server Shutdown(grace) →
// Shutdown() (flushes traces). Registration happens before the server starts;
// the rest is thread-safe after Start.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"
#include "obs/metrics.h"
#include "obs/metrics_server.h"
#include "obs/tracer.h"
#include "core/util/cli_args.h"
#include "rpc/health_port.h"
#include "rpc/server_telemetry.h"
#include "rpc/step_stream.h"

namespace treespec {

struct ObservabilityOptions {
  std::string service_name;  // service.name
  std::string host = "127.0.0.1";  // where the metrics and health ports bind
  int metrics_port = -1;
  int health_port = -1;
  std::string otlp_endpoint;
  double trace_sample_ratio = 1.0;
  int trace_queue_size = 8192;
  int rank = -1;  // treespec.rank resource attribute when >= 0
  absl::Status Validate() const;

  // From the flags above; `listen` is the binary's --listen HOST:PORT.
  static ObservabilityOptions FromFlags(const std::string& default_service_name,
                                        const std::string& listen, int rank = -1);
};

class ServiceObservability {
 public:
  static absl::StatusOr<std::unique_ptr<ServiceObservability>> Start(ObservabilityOptions options);
  ~ServiceObservability();

  MetricsRegistry* registry() { return &registry_; }
  Tracer* tracer() { return tracer_.get(); }  // null when tracing is off

  // Also time `method` (full name, "/treespec.v1.Worker/Verify") into `histogram`.
  void TimeMethod(const std::string& method, Histogram* histogram);
  // `method` (full name) gets metrics but no server span (probes, clean-up).
  void Untraced(const std::string& method);
  // Polls `is_broken` every second from a thread of its own (until Shutdown);
  // once it returns true the health port reports broken (readiness and
  // liveness NOT_SERVING) so that Kubernetes restarts the process. Nothing
  // when there is no health port. At most one watch.
  void WatchHealth(std::function<bool()> is_broken);

  // For StartServer; `untraced` methods get metrics but no server span;
  // `stream_methods` (step streams) are left to StreamCalls.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors(std::set<std::string> untraced = {}, std::set<std::string> stream_methods = {});
  // For StartServer: records each request on a step stream as its unary method.
  StreamCallRecorder StreamCalls(std::set<std::string> untraced = {});

  void SetServing(bool serving);
  // Flushes traces (up to `flush_timeout`), stops the metrics and health
  // ports. Idempotent.
  void Shutdown(std::chrono::milliseconds flush_timeout = std::chrono::seconds(5));

 private:
  ServiceObservability() = default;
  ServerTelemetryOptions TelemetryOptions(std::set<std::string> untraced) const;

  ObservabilityOptions options_;
  MetricsRegistry registry_;
  HistogramFamily* rpc_seconds_ = nullptr;
  CounterFamily* rpc_calls_ = nullptr;
  std::map<std::string, Histogram*> method_histograms_;
  std::set<std::string> untraced_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<HealthPort> health_;
  bool shut_down_ = false;
  // The health watch (WatchHealth).
  absl::Mutex watchdog_mu_;
  bool watchdog_stop_ ABSL_GUARDED_BY(watchdog_mu_) = false;
  std::thread watchdog_;
};

}  // namespace treespec
