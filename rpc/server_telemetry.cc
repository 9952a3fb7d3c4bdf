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
    const auto end = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(end - start_).count();
    if (options_->rpc_seconds != nullptr) {
      options_->rpc_seconds->WithLabels({method_})->Observe(seconds);
    }
    if (options_->rpc_calls != nullptr) {
      options_->rpc_calls->WithLabels({method_, CodeName(status.error_code())})->Inc();
    }
    auto it = options_->method_histograms.find(method_);
    if (it != options_->method_histograms.end()) it->second->Observe(seconds);
    if (!traced_ || options_->tracer == nullptr) return;
    if (!have_context_ && info_->server_context() != nullptr) {
      ReadContext(info_->server_context()->client_metadata());
    }
    SpanData span;
    span.context = options_->tracer->NewContext(parent_);
    if (!span.context.sampled()) return;
    if (parent_.valid()) span.parent_span_id = parent_.span_id;
    // "/pkg.Service/Method" -> "pkg.Service/Method" (OpenTelemetry's RPC span name).
    span.name = method_.substr(1);
    span.kind = SpanKind::kServer;
    span.start_unix_ns = start_unix_ns_;
    span.end_unix_ns = start_unix_ns_ + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            end - start_).count();
    const size_t slash = method_.rfind('/');
    span.Add("rpc.system", std::string("grpc"));
    span.Add("rpc.service", method_.substr(1, slash - 1));
    span.Add("rpc.method", method_.substr(slash + 1));
    span.Add("rpc.grpc.status_code", static_cast<int64_t>(status.error_code()));
    span.links = std::move(links_);
    if (status.ok()) {
      span.status = SpanStatus::kUnset;
    } else {
      span.status = SpanStatus::kError;
      span.status_message = CodeName(status.error_code());
    }
    options_->tracer->Record(std::move(span));
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
    if (method == nullptr || absl::StartsWith(method, "/grpc.")) return nullptr;
    const bool traced = options_.tracer != nullptr && !options_.untraced.count(method);
    return new TelemetryInterceptor(&options_, info, traced);
  }

 private:
  const ServerTelemetryOptions options_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeServerTelemetry(
    ServerTelemetryOptions options) {
  return std::make_unique<Factory>(std::move(options));
}

}  // namespace treespec
