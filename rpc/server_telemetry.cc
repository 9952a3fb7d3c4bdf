#include "rpc/server_telemetry.h"

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "rpc/trace_grpc.h"

namespace treespec {
namespace {

using Hook = grpc::experimental::InterceptionHookPoints;

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// One call's metrics and, when `traced`, its SERVER span.
void RecordCall(const ServerTelemetryOptions& options, const std::string& method,
                std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end, int64_t start_unix_ns,
                const grpc::Status& status, bool traced, const SpanContext& parent,
                std::vector<SpanContext> links) {
  const double seconds = std::chrono::duration<double>(end - start).count();
  if (options.rpc_seconds != nullptr) {
    options.rpc_seconds->WithLabels({method})->Observe(seconds);
  }
  if (options.rpc_calls != nullptr) {
    options.rpc_calls->WithLabels({method, CodeName(status.error_code())})->Inc();
  }
  auto it = options.method_histograms.find(method);
  if (it != options.method_histograms.end()) it->second->Observe(seconds);
  if (!traced || options.tracer == nullptr) return;
  SpanData span;
  span.context = options.tracer->NewContext(parent);
  if (!span.context.sampled()) return;
  if (parent.valid()) span.parent_span_id = parent.span_id;
  // "/pkg.Service/Method" -> "pkg.Service/Method" (OpenTelemetry's RPC span name).
  span.name = method.substr(1);
  span.kind = SpanKind::kServer;
  span.start_unix_ns = start_unix_ns;
  span.end_unix_ns =
      start_unix_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  const size_t slash = method.rfind('/');
  span.Add("rpc.system", std::string("grpc"));
  span.Add("rpc.service", method.substr(1, slash - 1));
  span.Add("rpc.method", method.substr(slash + 1));
  span.Add("rpc.grpc.status_code", static_cast<int64_t>(status.error_code()));
  span.links = std::move(links);
  if (status.ok()) {
    span.status = SpanStatus::kUnset;
  } else {
    span.status = SpanStatus::kError;
    span.status_message = CodeName(status.error_code());
  }
  options.tracer->Record(std::move(span));
}

class TelemetryInterceptor final : public grpc::experimental::Interceptor {
 public:
  TelemetryInterceptor(const ServerTelemetryOptions* options,
                       grpc::experimental::ServerRpcInfo* info, bool traced)
      : options_(options),
        info_(info),
        method_(info->method()),
        traced_(traced),
        start_(std::chrono::steady_clock::now()),
        start_unix_ns_(NowUnixNanos()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_INITIAL_METADATA) && traced_) {
      const GrpcMetadata* md = methods->GetRecvInitialMetadata();
      if (md != nullptr) ReadContext(*md);
    }
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) {
      Finish(methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  void ReadContext(const GrpcMetadata& md) {
    have_context_ = true;
    parent_ = ExtractTraceparent(md);
    links_ = ExtractTraceLinks(md);
  }

  void Finish(const grpc::Status& status) {
    if (traced_ && !have_context_ && info_->server_context() != nullptr) {
      ReadContext(info_->server_context()->client_metadata());
    }
    RecordCall(*options_, method_, start_, std::chrono::steady_clock::now(), start_unix_ns_, status,
               traced_, parent_, std::move(links_));
  }

  const ServerTelemetryOptions* const options_;
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string method_;
  const bool traced_;
  const std::chrono::steady_clock::time_point start_;
  const int64_t start_unix_ns_;
  bool have_context_ = false;
  SpanContext parent_;
  std::vector<SpanContext> links_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(ServerTelemetryOptions options) : options_(std::move(options)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr || absl::StartsWith(method, "/grpc.") || options_.skipped.count(method)) {
      return nullptr;
    }
    const bool traced = options_.tracer != nullptr && !options_.untraced.count(method);
    return new TelemetryInterceptor(&options_, info, traced);
  }

 private:
  const ServerTelemetryOptions options_;
};

}  // namespace

StreamCallRecorder MakeStreamCallTelemetry(ServerTelemetryOptions options) {
  return [options = std::move(options)](const StreamCall& call) {
    const bool traced = options.tracer != nullptr && !options.untraced.count(call.method);
    SpanContext parent;
    std::vector<SpanContext> links;
    if (traced && call.trace != nullptr) {
      std::optional<SpanContext> p = ParseTraceparent(call.trace->traceparent());
      if (p.has_value()) parent = *p;
      links = ParseTraceLinks(call.trace->links());
    }
    RecordCall(options, call.method, call.start, call.end, call.start_unix_ns, call.status, traced,
               parent, std::move(links));
  };
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeServerTelemetry(
    ServerTelemetryOptions options) {
  return std::make_unique<Factory>(std::move(options));
}

}  // namespace treespec
