// GenerateTelemetry: the request-level metrics and the `generate` span of one
// Generate call (telemetry.h), driven by GenerationService on the handler
// thread: TTFT, TPOT, per-token ITL and end-to-end latency as the chunks are
// sent, requests by status code and finish reason at the end. Times are taken
// when a chunk is handed to gRPC, the closest the server gets to the client.
// The span carries counts, names and codes only — never prompt or completion
// text. With a null CoordinatorTelemetry every call is a no-op.
// Thread-compatible (one handler thread).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "coordinator/request.h"
#include "coordinator/telemetry.h"
#include "grpcpp/grpcpp.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

class GenerateTelemetry {
 public:
  using Clock = std::chrono::steady_clock;

  // `incoming`: the client's traceparent (invalid: start a new root).
  GenerateTelemetry(CoordinatorTelemetry* t, const SpanContext& incoming, Clock::time_point received);
  ~GenerateTelemetry();

  // The `generate` span's context, for the lanes (invalid without a tracer).
  const SpanContext& context() const { return ctx_; }
  void Admitted(const GenerationRequest& request);
  // A chunk is about to be sent.
  void OnChunk(const v1::GenerateResponse& chunk);
  // Records the end of the call; returns `status` unchanged.
  grpc::Status Finish(grpc::Status status);

 private:
  CoordinatorTelemetry* const t_;
  const Clock::time_point received_;
  SpanContext ctx_;
  SpanContext incoming_;
  std::string drafter_ = "unknown";
  Histogram* itl_ = nullptr;
  int64_t tokens_ = 0;
  Clock::time_point first_token_, last_token_;
  v1::GenerateResponse final_;
  bool has_final_ = false;
  bool admitted_ = false;
  bool finished_ = false;
  std::vector<Attribute> attributes_;
};

}  // namespace treespec
