// Runs a load test against a coordinator: closed loop (a fixed number of
// clients, each sending its next request when the last one ended) or open
// loop (Poisson arrivals at a fixed rate, however many are in flight).
// Requests cycle through the workload. Reports progress on stderr while it
// runs. Thread-safe internally; RunLoad itself is called once per run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/loadgen/stats.h"
#include "treespec/v1/generation.grpc.pb.h"

namespace treespec::loadgen {

struct LoadOptions {
  int concurrency = 0;   // closed loop when > 0
  double rate = 0;       // open loop (requests / s) when > 0
  int64_t num_requests = 100;  // with duration_s: at most this many
  // Closed loop: clients start no new request after this many seconds (the
  // ones in flight finish); 0: run num_requests.
  double duration_s = 0;
  // Every cancel_every-th request (k > 0) is cancelled by its client right
  // after its first token (ClientContext::TryCancel); 0: none.
  int64_t cancel_every = 0;
  // Called once per finished request, from the client threads (must be
  // thread-safe); null: none.
  std::function<void(const RequestResult&)> on_result;
  uint64_t seed = 1;     // Poisson arrivals
  double timeout_s = 600;
  double progress_interval_s = 1.0;  // 0: quiet
  std::string authorization;  // "Bearer TOKEN" sent with every request; empty: none
  absl::Status Validate() const;
};

struct LoadRun {
  std::vector<RequestResult> results;  // in send order
  double duration_s = 0;               // first send to last completion
};

absl::StatusOr<LoadRun> RunLoad(v1::Generation::Stub* stub,
                                const std::vector<v1::GenerateRequest>& workload,
                                const LoadOptions& options);

}  // namespace treespec::loadgen
