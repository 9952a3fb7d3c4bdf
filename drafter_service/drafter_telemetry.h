// The drafter's metrics on its ServiceObservability (rpc/):
//
//   treespec_drafter_sequences           live sequences
//   treespec_drafter_state_slots{state}  drafter state slots, used and free
//   treespec_drafter_step_seconds{phase} Draft ("draft") and Open ("prefill") time
//   treespec_drafter_predraft_{hits,misses,unprepared}_total  pre-drafting outcomes
//
// The gauges read the service's GetDrafterInfo handler at scrape time.
// GetDrafterInfo and Release (probes, clean-up) get no spans. Call before the
// server starts; `service` must outlive `obs`'s Shutdown.
#pragma once

#include "rpc/observability.h"
#include "treespec/v1/drafter.grpc.pb.h"

namespace treespec {

void RegisterDrafterTelemetry(v1::Drafter::Service* service, ServiceObservability* obs);

}  // namespace treespec
