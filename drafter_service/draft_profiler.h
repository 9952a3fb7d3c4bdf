// The drafter's start-up profile of its Draft call: a few batch sizes × tree
// depths × widths, drafted for throw-away sequences through the Drafter
// interface and fitted into a DraftCostModel (core/spec/step_cost_model.h)
// that DrafterInfo reports, so the coordinator plans its first steps with
// the drafter's real time per level and per sequence.
//
// The trees are drafted at temperature 1: sampled drafts start no
// pre-drafting (DrafterOptions::predraft_sampled is off by default), so no
// background work overlaps the timed calls and none is left behind. Their
// per-node work is the same as greedy drafting's (one model step per level,
// one top-k pass per expanded node). The profile's sequences use ids >= 2^63
// (the coordinator draws ids below 2^62) and are released at the end; their
// Draft calls still count in the drafter's pre-draft counters, so a service
// subtracts DrafterStats taken after profiling (DrafterService::
// SetStartupProfile).
//
// Thread-compatible; call before serving.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/spec/step_cost_model.h"
#include "drafter_service/drafter.h"

namespace treespec {

struct DraftProfileOptions {
  std::vector<int64_t> batches = {1, 4, 16};
  std::vector<int32_t> depths = {1, 3, 6};
  std::vector<int32_t> widths = {1, 3};  // fanouts {width, 1, 1, ...}
  int32_t prompt_tokens = 16;
  int32_t repeats = 2;
  // No new grid point starts past this (the points measured so far are fitted).
  absl::Duration budget = absl::Milliseconds(1500);
  absl::Status Validate() const;
};

// The measured Draft calls (one sample per call), with features from the
// trees actually returned. Batches and shapes are cut to `max_sequences` and
// `max_tree_nodes`. FAILED_PRECONDITION when the drafter cannot open or
// draft the profile's sequences.
absl::StatusOr<std::vector<DraftSample>> ProfileDraftCalls(Drafter* drafter,
                                                           int64_t max_sequences,
                                                           int64_t max_tree_nodes,
                                                           const DraftProfileOptions& options);

// ProfileDraftCalls then DraftCostModel::FitProfile.
absl::StatusOr<DraftCostModel> MeasureDraftCost(Drafter* drafter, int64_t max_sequences,
                                                int64_t max_tree_nodes,
                                                const DraftProfileOptions& options);

}  // namespace treespec
