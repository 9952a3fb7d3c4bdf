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

  // The same costs for a batch of `batch` with `context` cached tokens,
  // calibrated: Verify(batch, batch) + overhead becomes kp times itself, and
  // every increment over it (tree tokens, drafting) km times itself, drafting
  // kd times more (PlannerOptions::draft_time_scale). Exact for tokens >=
  // batch, the only ones a plan verifies; the per-step term may go negative
  // for that.
  void Calibrate(int64_t batch, int64_t context, double kp, double km, double kd = 1.0) {
    d.per_call *= kd;
    d.per_level *= kd;
    d.per_sequence_level *= kd;
    d.per_node *= kd;
    d_min *= kd;
    if (kp == 1.0 && km == 1.0) return;
    const double plain = Verify(batch, batch, context) + overhead;
    const double past = v.knee_tokens > 0 ? std::max<int64_t>(0, batch - v.knee_tokens) : 0;
    const double tokens_part =
        v.per_token * static_cast<double>(batch) + v.per_token_past_knee * past;
    v.per_token *= km;
    v.per_token_past_knee *= km;
    v.per_step = kp * plain - km * tokens_part;
    v.per_sequence = 0.0;
    v.per_context_token = 0.0;
    v_min = 0.0;
    overhead = 0.0;
    d.per_call *= km;
    d.per_level *= km;
    d.per_sequence_level *= km;
    d.per_node *= km;
    d_min *= km;
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
