// Tree-shape choice for one sampled "auto" sequence, with plain decoding as an
// arm: the drafter may be useless, and then the cheapest step is no tree.
//
// Why not UcbBandit (bandit.h): its reward charges only depth, not tree size
// or the drafter call, it has no "no tree" arm, and UCB1 tries every arm once
// and keeps exploring big trees, so a useless drafter's sampled requests ran
// at 0.13-0.33x plain decoding (spec_bench, temperature 1).
//
// Model. Arms share one acceptance estimate: α, the chance that one drafted
// candidate is accepted. A level of fanout w is passed with probability
// p(w) = 1 − (1 − α)^w, so a shape's expected emitted tokens are
//   E = 1 + Σ_l Π_{j≤l} p(N_j)             (bonus token included)
// and its reward is r = −cost / E, with cost the modelled step time relative
// to a plain step (StepCostRatios; plain: cost 1, E = 1, r = −1 exactly).
// Observations: a step with fanouts N_1..N_γ that accepted a draft tokens
// passed levels 1..a (one success and one trial each, as if the first
// candidate examined were accepted) and, when a < γ, failed level a+1 (N_{a+1}
// trials, no success).
//
// Exploration: α starts optimistic but bounded (prior successes / trials,
// default 1 / 2) and the choice uses α + c·sqrt(ln(t+1) / trials), with t the
// sequence's steps (plain ones included). c is small, so a useless drafter
// drives α toward 0 within a few steps and plain then wins; the bonus grows
// only logarithmically, so speculation is retried rarely. A good drafter keeps
// α high and keeps the deep trees.
//
// Determinism: the choice depends only on this sequence's own outcomes and on
// constants fixed when it is created (the lane's start-up profiles, frozen),
// never on measured times or on other sequences, so a seed reproduces text.
//
// A plain value type; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct SampledBanditOptions {
  double explore = 0.1;          // c, the bonus weight on α
  double prior_accepted = 1.0;   // optimistic start: α0 = prior_accepted / prior_trials
  double prior_trials = 2.0;    // worth two trials
  absl::Status Validate() const;  // finite, >= 0; prior_trials > 0; prior_accepted <= prior_trials
};

// Step cost of a shape relative to a plain step of one sequence. The fixed
// constants are conservative stand-ins for when the lane has no profiles.
struct StepCostRatios {
  double per_draft_node = 0.10;  // verify: one more packed token
  double draft_call = 0.15;      // the drafter's per-call cost
  double per_level = 0.05;       // the drafter's per-level cost
  double per_draft_node_drafting = 0.0;  // the drafter's per-node cost
  double per_node_past_knee = 0.0;        // verify: past the roofline knee
  int64_t knee_tokens = 0;                // packed tokens (root included); <= 0: none
  // From start-up profiles, relative to one sequence's share of a plain step
  // of `reference_batch` sequences (empty context): per_step / reference_batch
  // + per_sequence + per_token; the drafter's per-call cost and the verify
  // knee are shared the same way. A larger reference batch is more
  // conservative (the fixed step cost is shared, a tree token is not): with
  // the largest batch the lane runs, a shape that pays here pays at every
  // load, which is how the coordinator uses it (StepMachineOptions::
  // sampled_cost_batch). nullopt profiles keep the constants above, as does a
  // plain share that predicts <= 0.
  static StepCostRatios FromProfiles(const std::optional<VerifyCostModel>& verify,
                                     const std::optional<DraftCostModel>& draft,
                                     int reference_batch = 1);
  double Cost(const TreeShape& shape) const;  // >= 1
};

class SampledShapeBandit {
 public:
  // INVALID_ARGUMENT for bad options or no shapes (field `tree_shapes`).
  static absl::StatusOr<SampledShapeBandit> Create(std::vector<TreeShape> shapes,
                                                   StepCostRatios costs,
                                                   SampledBanditOptions options = {});

  // The shape index for the next step, or nullopt: decode plainly. Ties go to
  // plain, then to the lowest index.
  std::optional<int> Select() const;
  // A plain step was taken (advances the exploration clock).
  void UpdatePlain() { ++steps_; }
  // A step drafted with shape `arm` accepted `num_accepted_draft` draft tokens
  // (bonus excluded; clamped to [0, depth]).
  void Update(int arm, int32_t num_accepted_draft);

  int num_arms() const { return static_cast<int>(shapes_.size()); }
  const TreeShape& arm(int k) const { return shapes_[k]; }
  double acceptance() const { return accepted_ / trials_; }  // α̂
  int64_t steps() const { return steps_; }
  // E for shape k at acceptance α (exposed for tests).
  double ExpectedTokens(int k, double alpha) const;

 private:
  SampledShapeBandit(std::vector<TreeShape> shapes, StepCostRatios costs,
                     SampledBanditOptions options);

  std::vector<TreeShape> shapes_;
  std::vector<double> cost_;  // StepCostRatios::Cost per shape, frozen
  SampledBanditOptions options_;
  double accepted_;
  double trials_;
  int64_t steps_ = 0;
};

}  // namespace treespec
