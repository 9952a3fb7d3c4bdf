// The worker's start-up profile of its verify step: a few batch sizes × tree
// tokens per sequence × context lengths, each run as real Verify calls of a
// TargetRunner over throw-away sequences, fitted into a VerifyCostModel
// (core/spec/step_cost_model.h) that WorkerInfo reports so the coordinator
// plans its first steps with the right costs.
//
// What is timed is the forward pass the runner reports (StepTimings::
// forward_ns), the same quantity the coordinator's online refits observe.
// The sequences are chains of arbitrary tokens (almost never accepted, so
// each step commits one token and the context stays near its grid value),
// opened under ids >= 2^63, which the coordinator never uses (it draws ids
// below 2^62), and released before the worker serves. A time budget stops
// the grid early on a slow device; the fit needs only a handful of points.
//
// Thread-compatible; call before serving.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/spec/step_cost_model.h"
#include "worker/target_runner.h"

namespace treespec {

struct VerifyProfileOptions {
  std::vector<int64_t> batches = {1, 4, 16};
  std::vector<int64_t> tokens_per_sequence = {1, 4, 16};  // tree nodes, root included
  std::vector<int64_t> contexts = {8, 64};                // prompt tokens per sequence
  int32_t repeats = 2;                                    // steps per grid point
  // No new grid point starts past this (the points measured so far are fitted).
  absl::Duration budget = absl::Milliseconds(1500);
  absl::Status Validate() const;
};

// The measured steps (one sample per step). Batches, trees and contexts are
// cut to the runner's limits. FAILED_PRECONDITION when the runner cannot
// open the profile's sequences (e.g. too little KV memory).
absl::StatusOr<std::vector<VerifySample>> ProfileVerifySteps(TargetRunner* runner,
                                                             const VerifyProfileOptions& options);

// ProfileVerifySteps then VerifyCostModel::FitProfile.
absl::StatusOr<VerifyCostModel> MeasureVerifyCost(TargetRunner* runner,
                                                  const VerifyProfileOptions& options);

}  // namespace treespec
