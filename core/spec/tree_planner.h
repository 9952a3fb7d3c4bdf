// Per-step choice of every sequence's draft tree for a whole batch, so that
// speculation always pays: the batch's expected committed tokens per second
// under the step cost model (step_cost_model.h) and the acceptance estimates
// (acceptance_model.h) are maximised, and plain decoding is one of the
// choices. Two decisions per step:
//   PlanShapes  before drafting: a shape (or none) per sequence from a
//               candidate set; no tree anywhere means the drafter is not called.
//   PruneTrees  after drafting: which nodes of each drafted tree to verify,
//               node by node.
//
// Why this objective. A worker group runs step after step; over a run, the
// tokens committed per second are Σ tokens / Σ seconds, and for a stationary
// policy that is E[tokens of a step] / E[seconds of a step] (renewal-reward).
// A step with trees T_1..T_B emits E = Σ_i (1 + Σ_{v∈T_i} π_v) tokens in
// expectation (π_v = P(v on the accepted path), acceptance_model.h) and takes
//   T = T_draft(depths, nodes) + T_verify(B, B + Σ_i |T_i|, context) + overhead,
// so each step maximises ρ = E / T. Plain decoding is the plan with no trees:
// ρ_0 = B / (T_verify(B, B, C) + overhead), with no drafter call.
// Paper 000 §4.2 rewards a shape with r = −(1 + λ_γ·γ) / N_accept (Eq. 2,
// from A.4): that is −1 / (ρ·T_target) for one sequence whose verify time does
// not depend on the tree (T_target(γ) ≈ T_target) and whose drafting costs
// λ_γ·T_target per level. The planner keeps its goal — time per token — and
// drops the assumptions that break in serving: verify time grows with the
// batch's tree tokens (past the roofline knee, steeply), the step time is
// shared by the batch so trees must be chosen jointly, the drafter's cost has
// per-call and per-level parts, and "no tree" must be an arm. Acceptance
// comes from calibrated estimates shared by all sequences of a drafter
// instead of each sequence's own pulls of each arm. The UCB bandit stays in
// two places: its exploration bonus, sqrt(ln t / n), is added to the
// shape-level acceptance estimates (PlannerOptions::explore, over counts
// discounted per step), so a drafter that stopped paying is retried now and
// then; and UcbBandit itself remains
// the fallback for sequences of a drafter with no cost model yet (before the
// start-up profile exists).
//
// PlanShapes is exact for a fixed deepest tree D and side of the knee. The
// drafter's per-call and per-level costs depend only on D; everything else in
// T is a sum over sequences, c_i(s) = (per-token verify cost)·|s| +
// (per-sequence-level draft cost)·depth(s) + (per-node draft cost)·|s|. For
// a ratio objective, Dinkelbach's lemma: ρ* = max E/T iff
// max_S E(S) − ρ*·T(S) = 0, and for a fixed ρ that maximisation separates:
// s_i = argmax_s e_i(s) − ρ·c_i(s). Starting from ρ = ρ_0 and setting
// ρ ← E(S)/T(S) raises ρ strictly until no plan beats it (2–4 rounds in
// practice). D runs over the candidate depths and the knee's two sides over
// their linear pieces; each plan is then scored with the true T. The hinge
// is where this is not exact: the best plan often fills the pass exactly up
// to the knee, which neither linear piece proposes (the Lagrange multiplier
// of the knee lies strictly between the two slopes, and identical sequences
// all flip at once). A greedy polish follows under the true T: each sequence
// in turn takes its best option given the others while that raises ρ
// (greedy marginal-gain allocation, coordinate ascent), started from the
// Dinkelbach plan and, past a knee, also from each depth's knee-blind plan
// that overshoots it, so trees are dropped down to the knee.
// Against brute force over all combinations the plan is optimal without a
// knee and within a few percent with one (tree_planner_test).
// Only strict improvements over ρ_0 are taken, so a plan is never predicted
// slower than plain decoding (with explore = 0; exploration is optimistic by
// design).
//
// PruneTrees is exact. The drafting time is spent; the verify time depends on
// the batch's total kept nodes n only, and the gain Σ π_v is additive. π is
// non-increasing along every path (a ≤ 1), so ranking all nodes of the batch
// by π, ties to the lower (sequence, node) index, puts every node after its
// parent: for each n the top n nodes form valid trees and carry the most
// expected tokens any n nodes can. Scanning n = 0..N for the best
// E(n) / (T_draft + T_verify(B, B + n, C) + overhead) is O(N log N); the sunk
// T_draft stays in the denominator so that ρ is the step's own rate, the
// estimate of the long-run rate a verified node has to beat. Nodes with
// π < ρ_0·(per-token verify cost), ρ_0 the rate with nothing kept, are
// dropped before sorting: E concave and T convex make E(n)/T(n) rise to its
// peak and then fall, so the last node of the best prefix has π ≥ ρ_0·c. Read as
// Dinkelbach, a node is kept iff π_v ≥ ρ·∂T_verify/∂n: it pays when its
// chance of being accepted exceeds the tokens the batch would emit in the
// time verifying it costs. With sibling_prefix the rank key is
// π̃_v = min(π_v, π̃_parent, π̃_previous sibling), so a kept child's earlier
// siblings are kept too — multi-round verification (verify.h) requires the
// children to be sequential draws without replacement, and a prefix of the
// draws still is one. This stays exact when drafters expand siblings in
// decreasing acceptance (top-k drafters); otherwise it is the best prefix
// under π̃.
//
// One step, as the coordinator is meant to run it (per drafter and worker group):
//   acceptance.AdvanceRound();
//   plan = PlanShapes(batch, shapes, acceptance, verify, draft, options);
//   if plan.call_drafter: trees = Draft(plan.shapes)            (else root-only trees)
//   prune = PruneTrees(batch, trees, acceptance, verify, measured_draft_s, options);
//   verified = KeepNodes(trees[i], prune.kept[i]); results = Verify(verified)
//   acceptance.ObserveBatch(verified, paths); verify.Observe(...); draft.Observe(...)
// and report plan / prune expected_tokens against the tokens each step emitted.
//
// Pure functions of their inputs; thread-safe. Deterministic: equal inputs
// give equal plans.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/spec/acceptance_model.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/token_tree.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct PlannerOptions {
  double explore = 0.0;           // UCB weight on shape-level acceptance (AcceptanceModel)
  double overhead_seconds = 0.0;  // per-step time outside drafting and verifying
  int64_t max_step_tokens = 0;    // PruneTrees: verified tokens per step, roots included; 0: no cap
  bool sibling_prefix = true;     // PruneTrees keeps children as a prefix in draft order
  // PlanShapes: measured over modelled step time (the lane's calibration,
  // coordinator/spec_planner.h). The plain step (overhead included) takes
  // plain_time_scale times its modelled time, and what trees add to it
  // (tree tokens, drafting) added_time_scale times theirs. Both > 0.
  double plain_time_scale = 1.0;
  double added_time_scale = 1.0;
  // The share of the modelled Draft call time a step waits for, in [0, 1]:
  // 1 without draft-ahead; with it, the drafter answers the hits' trees
  // during the previous Verify and only the misses' Draft call remains
  // (coordinator/step_machine.h).
  double draft_time_scale = 1.0;
  absl::Status Validate() const;
};

// One sequence of the batch as the planner sees it.
struct PlanSequence {
  int64_t context_tokens = 0;                   // cached tokens
  int64_t remaining_tokens = int64_t{1} << 40;  // tokens it may still emit (>= 1)
  bool can_draft = true;                        // false: no drafter for it this step
  int64_t draft_backlog = 0;  // tokens the drafter has yet to consume (fed by its next Draft)
  std::optional<TreeShape> fixed_shape;         // a request that names a shape gets it
};

struct ShapePlan {
  // [batch] the shape to draft, already cut to the token budget; nullopt: no tree.
  std::vector<std::optional<TreeShape>> shapes;
  std::vector<double> expected_tokens;  // [batch] 1 + Σ level reach (no exploration bonus)
  bool call_drafter = false;            // some sequence has a tree
  double total_expected_tokens = 0.0;
  double draft_seconds = 0.0;
  double verify_seconds = 0.0;
  double step_seconds = 0.0;   // draft + verify + overhead
  double plain_seconds = 0.0;  // the same batch decoded plainly
  double tokens_per_second() const { return total_expected_tokens / step_seconds; }
  double plain_tokens_per_second() const { return shapes.size() / plain_seconds; }
};

// INVALID_ARGUMENT for bad options or a sequence with remaining_tokens < 1
// or context_tokens < 0 (naming batch[i]).
absl::StatusOr<ShapePlan> PlanShapes(absl::Span<const PlanSequence> batch,
                                     absl::Span<const TreeShape> candidates,
                                     const AcceptanceModel& acceptance,
                                     const VerifyCostModel& verify, const DraftCostModel& draft,
                                     const PlannerOptions& options);

struct PrunePlan {
  // [batch] kept node indices of each drafted tree, ascending, root (0) first;
  // {0} alone is plain decoding for that sequence.
  std::vector<std::vector<int32_t>> kept;
  std::vector<double> expected_tokens;  // [batch] 1 + Σ_{kept v ≠ 0} π_v
  double total_expected_tokens = 0.0;
  int64_t verify_tokens = 0;  // kept nodes of the batch, roots included
  double draft_seconds = 0.0;
  double verify_seconds = 0.0;
  double step_seconds = 0.0;  // draft + verify + overhead
  double tokens_per_second() const { return total_expected_tokens / step_seconds; }
};

// `trees[i]` is what the drafter proposed for batch[i] (a root-only tree when
// it has none); draft_seconds is the drafting time already spent. Nodes
// deeper than remaining_tokens − 1 are never kept. INVALID_ARGUMENT for bad
// options, sizes that differ, or a tree whose parents are not topological.
absl::StatusOr<PrunePlan> PruneTrees(absl::Span<const PlanSequence> batch,
                                     absl::Span<const TokenTree> trees,
                                     const AcceptanceModel& acceptance,
                                     const VerifyCostModel& verify, double draft_seconds,
                                     const PlannerOptions& options);

// The subtree of `tree` on `kept` (ascending, root first, every parent kept):
// nodes renumbered in the same order, draft distributions kept with them.
TokenTree KeepNodes(const TokenTree& tree, absl::Span<const int32_t> kept);

}  // namespace treespec
