// Server-side telemetry for every treespec gRPC service, as a gRPC server
// interceptor: each RPC is timed (histogram treespec_rpc_server_seconds and
// counter treespec_rpc_server_calls_total by method and code, plus an optional
// per-method histogram such as the worker's step time) and recorded as a
// SERVER span whose parent is the caller's `traceparent` (a new root when it
// is absent or invalid) and whose links are the caller's
// `treespec-trace-links`. Health and reflection RPCs are left alone; methods
// listed in `untraced` get metrics but no span (their service makes its own,
// as the coordinator's Generate does).
//
// The factory is handed to StartServer, which owns it; the registry, families
// and tracer it points to must outlive the server. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "grpcpp/support/server_interceptor.h"
#include "obs/metrics.h"
#include "obs/tracer.h"
#include "rpc/step_stream.h"

namespace treespec {

struct ServerTelemetryOptions {
  HistogramFamily* rpc_seconds = nullptr;  // labels {method}; null: none
  CounterFamily* rpc_calls = nullptr;      // labels {method, code}; null: none
  // Full method name ("/treespec.v1.Worker/Verify") -> a histogram that also
  // gets that method's handling time.
  std::map<std::string, Histogram*> method_histograms;
  Tracer* tracer = nullptr;  // null: no spans
  std::set<std::string> untraced;
  // Methods the interceptor leaves alone: step streams, whose requests are
  // recorded one by one as their unary method (MakeStreamCallTelemetry).
  std::set<std::string> skipped;
};

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeServerTelemetry(
    ServerTelemetryOptions options);

// Records each request on a step stream (rpc/step_stream.h) as the interceptor
// records a unary call of StreamCall::method: metrics, and a SERVER span whose
// parent and links come from the request's CallTrace.
StreamCallRecorder MakeStreamCallTelemetry(ServerTelemetryOptions options);

}  // namespace treespec
