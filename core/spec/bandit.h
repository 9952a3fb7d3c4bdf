// Test-time tree-shape search as a multi-armed bandit (paper 000, Sec. 4.2).
//
// Each arm is a TreeShape. Every speculative step is one round: Select() picks
// the shape to draft with, and Update() records the step's reward, Eq. 2:
//   r = −(1 / N_accept + λ_γ · γ / N_accept),
// the inverse speedup of one draft–verify step (A.4, Eq. 5 with
// T_target(γ)/T_target ≈ 1 and T_draft/T_target ≈ λ_γ), where N_accept counts
// the tokens the step emitted, bonus included (so N_accept ≥ 1), and γ is the
// arm's draft length (depth). Maximising r minimises time per token.
//
// The policy is UCB1 (Auer 2002), Eq. 1:
//   k* = argmax_k  r̂_k + λ_UCB · sqrt(2 ln t / n_k),
// with r̂_k the mean reward of arm k, n_k its pulls and t the rounds so far.
// Each arm is tried once first (n_k = 0 counts as +∞), ties go to the lowest
// index. Fully deterministic: no randomness and no clock.
//
// One bandit per sequence; a plain value type, not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct BanditOptions {
  double lambda_ucb = 1.0;     // exploration weight λ_UCB (Eq. 1)
  double lambda_gamma = 0.05;  // per-draft-token cost λ_γ ≈ T_draft / T_target (Eq. 2)
  absl::Status Validate() const;  // both finite and >= 0
};

inline constexpr int kMaxBanditArms = 64;

class UcbBandit {
 public:
  // INVALID_ARGUMENT for bad options, no arms, more than kMaxBanditArms, or a
  // repeated shape (field `tree_shapes`).
  static absl::StatusOr<UcbBandit> Create(std::vector<TreeShape> arms, BanditOptions options);

  // Eq. 2 for a step of draft length `gamma` that emitted `num_accepted`
  // tokens (values below 1 count as 1).
  static double Reward(int32_t num_accepted, int32_t gamma, double lambda_gamma);

  // Index of the arm to use for the next step.
  int Select() const;
  // Records the outcome of a step drafted with arm `arm` (0 <= arm < num_arms).
  void Update(int arm, int32_t num_accepted);

  int num_arms() const { return static_cast<int>(arms_.size()); }
  const TreeShape& arm(int k) const { return arms_[k]; }
  int64_t pulls(int k) const { return pulls_[k]; }
  double mean_reward(int k) const;  // 0 before the first pull
  int64_t rounds() const { return rounds_; }
  // The arm with the most pulls (ties: lowest index): what UCB has settled on.
  int MostPulled() const;

 private:
  UcbBandit(std::vector<TreeShape> arms, BanditOptions options);

  std::vector<TreeShape> arms_;
  BanditOptions options_;
  std::vector<int64_t> pulls_;
  std::vector<double> reward_sum_;
  int64_t rounds_ = 0;
};

}  // namespace treespec
