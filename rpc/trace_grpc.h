// W3C trace context over gRPC metadata: extraction on the server side and
// injection on the client side. The `traceparent` key carries the parent
// span; `treespec-trace-links` carries the other requests a batched RPC serves
// (obs/trace_context.h). Extraction never fails: absent or invalid headers
// give an invalid context (the server then starts a new root). Thread-safe.
#pragma once

#include <map>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "obs/trace_context.h"

namespace treespec {

using GrpcMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// The parent context in `metadata`, or an invalid context.
SpanContext ExtractTraceparent(const GrpcMetadata& metadata);
std::vector<SpanContext> ExtractTraceLinks(const GrpcMetadata& metadata);

// Adds the calling thread's OutgoingTrace (if any) to `ctx`.
void InjectTraceContext(grpc::ClientContext* ctx);

}  // namespace treespec
