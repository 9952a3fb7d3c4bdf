// The worker's metrics and health on its ServiceObservability (rpc/):
//
//   treespec_worker_sequences             live sequences
//   treespec_worker_kv_blocks{state}      KV cache blocks, used and free
//   treespec_worker_kv_block_size_tokens  tokens per KV cache block
//   treespec_worker_step_seconds{phase}   Verify ("verify") and Open ("prefill") time
//
// The gauges read the service's GetWorkerInfo handler at scrape time (no
// state of their own). GetWorkerInfo and Release (probes, clean-up) get no
// spans. The same handler is polled every second: once it answers
// UNAVAILABLE (a tensor-parallel group that failed) the health port reports
// broken so that Kubernetes restarts the rank. Call before the server starts;
// `service` must outlive `obs`'s Shutdown.
#pragma once

#include "rpc/observability.h"
#include "treespec/v1/worker.grpc.pb.h"

namespace treespec {

void RegisterWorkerTelemetry(v1::Worker::Service* service, ServiceObservability* obs);

}  // namespace treespec
