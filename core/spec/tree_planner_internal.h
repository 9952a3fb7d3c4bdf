// Internal to tree_planner.cc and tree_prune.cc: the step time of a plan
// from the cost models' coefficients, and the batch checks both share. Not
// part of the planner's API.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/tree_planner.h"

namespace treespec {
namespace planner_internal {

// T_verify and T_draft from the models' coefficients, term by term in the
// order LinearTimeModel::Predict sums them (so the values are identical),
// without the feature vectors Predict builds: the planner calls these
// thousands of times per step.
struct StepCost {
  VerifyCostModel::Coefficients v;
  DraftCostModel::Coefficients d;
  double v_min = 0.0, d_min = 0.0, overhead = 0.0;

  StepCost(const VerifyCostModel& verify, const DraftCostModel* draft, double overhead_s)
      : v(verify.coefficients()),
        v_min(verify.model().options().min_seconds),
        overhead(overhead_s) {
    if (draft != nullptr) {
      d = draft->coefficients();
      d_min = draft->model().options().min_seconds;
    }
  }

  double Verify(int64_t batch, int64_t tokens, int64_t context) const {
    const double past = v.knee_tokens > 0 ? std::max<int64_t>(0, tokens - v.knee_tokens) : 0;
    double t = 0.0;
    t += v.per_step * 1.0;
    t += v.per_sequence * static_cast<double>(batch);
    t += v.per_token * static_cast<double>(tokens);
    t += v.per_context_token * static_cast<double>(context);
    t += v.per_token_past_knee * past;
    return std::max(t, v_min);
  }

  double Draft(int64_t levels, int64_t seq_levels, int64_t nodes) const {
    if (levels <= 0) return 0.0;
    double t = 0.0;
    t += d.per_call * 1.0;
    t += d.per_level * static_cast<double>(levels);
    t += d.per_sequence_level * static_cast<double>(seq_levels);
    t += d.per_node * static_cast<double>(nodes);
    return std::max(t, d_min);
  }
};

inline absl::Status ValidateBatch(absl::Span<const PlanSequence> batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].remaining_tokens < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch[", i, "].remaining_tokens must be >= 1, got ", batch[i].remaining_tokens));
    }
    if (batch[i].context_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch[", i, "].context_tokens must be >= 0, got ", batch[i].context_tokens));
    }
  }
  return absl::OkStatus();
}

}  // namespace planner_internal
}  // namespace treespec
