// How likely a drafter's tokens are to be accepted, calibrated online from
// verification outcomes. Keep one model per (drafter, verification rule): a
// drafter's q means something different under greedy verification (does the
// target's argmax equal this token?) than under multi-round sampling.
//
// The quantity is a_v = P(node v is on the accepted path | its parent is),
// the chance that verification descends from parent(v) into v. Siblings are
// exclusive (one path is accepted), so Σ_siblings a_v <= 1, and the chance
// that v is accepted at all is the product along its path,
//   π_v = Π_{u on root→v, u ≠ root} a_u,
// which is all the tree planner needs: a step that verifies tree T emits
// 1 + Σ_{v∈T} π_v tokens in expectation (the bonus plus one per accepted
// node, by linearity over the indicator "v is on the accepted path").
//
// Two estimates of a_v, both Beta-posterior means over counted trials:
//  * Node level, after drafting: a function of the drafter's own probability
//    q_v of the token (draft[parent].ProbOf(token)) and the depth bucket of v.
//    q ∈ [0, 1] is cut into uniform bins; bin b of depth bucket d holds
//    (accepted, trials) and estimates (s + m·prior(q_b)) / (n + m), the prior
//    worth m = prior_strength trials. The prior is hierarchical:
//    prior(q) = min(1, s_d·q), with the scale s_d fitted to all trials of
//    bucket d and itself shrunk toward s_{d-1} (s_0's prior is q_prior_scale:
//    a calibrated drafter needs no correction). So a q the drafter rarely
//    produces follows the bucket's overall calibration, and a depth a bad
//    drafter never reaches (its parents are never accepted) follows the
//    depth above instead of trusting q. Pool-adjacent-violators then
//    makes the estimate non-decreasing in q (isotonic regression, weighted by
//    n + m), and values between bin centres are interpolated linearly (and
//    sampled on a 257-point grid of q for constant-time look-ups).
//  * Shape level, before drafting: a function of depth and sibling rank r
//    (the r-th child drafted under its parent, 0-based). Drafters expand the
//    most likely tokens first, so the rank stands in for the unknown q. This
//    gives E[tokens | shape] for shapes (N_1..N_γ): every node of level d-1
//    has the same N_d children, so P(reach level d) = Π_{j<=d} A_j with
//    A_j = Σ_{r<N_j} a(j, r), and E = 1 + Σ_d P(reach level d). The prior
//    of a(d, r) is a(d-1, r) (rank_prior_first·decay^r at depth 1).
// Nodes without q (greedy drafters) use the rank estimate after drafting too.
//
// Observation: for every node u on the accepted path, each child c of u was a
// trial; it succeeded iff c is the next path node. Children of nodes off the
// path were never tested and are not counted. Counts of a cell are halved
// once they pass max_count, so old behaviour fades (the text changes topic,
// the drafter's usefulness with it).
//
// Exploration: estimates before drafting can carry a UCB bonus
// explore·sqrt(ln(1 + rounds) / (1 + n)) (paper 000 Eq. 1's bonus, applied to
// acceptance instead of to a shape's reward): rounds counts planned steps
// (AdvanceRound), n the cell's trials. AdvanceRound also discounts the
// shape-level counts by round_discount (discounted UCB, Garivier & Moulines
// 2011): the estimate covers about the last 1 / (1 − discount) steps. When a
// drafter looks useless and stops being called, its n decays while ln(rounds)
// grows, so it is tried again after a while, and a drafter that became
// useful (the text turned repetitive) is noticed.
//
// A plain value type; not thread-safe for concurrent mutation, const methods
// may run concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/spec/token_tree.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct AcceptanceModelOptions {
  // First depth of each bucket of the node-level table: {1, 2, 3, 4, 6, 9}
  // makes buckets 1 | 2 | 3 | 4–5 | 6–8 | 9+. Must start at 1 and increase.
  std::vector<int32_t> depth_bucket_starts = {1, 2, 3, 4, 6, 9};
  int32_t num_q_bins = 10;        // uniform bins of q over [0, 1]
  double q_prior_scale = 1.0;     // prior a(q) = min(1, q_prior_scale·q)
  int32_t max_rank = 8;           // ranks >= max_rank - 1 share a column
  double rank_prior_first = 0.5;  // prior a(1, r) = first · decay^r (deeper: the row above)
  double rank_prior_decay = 0.4;
  double prior_strength = 4.0;    // pseudo-trials of the prior in every cell
  double max_count = 20000.0;     // a cell's counts are halved past this
  double round_discount = 0.995;  // shape-level counts × this per AdvanceRound; 1: never
  bool isotonic = true;           // make the node-level estimate non-decreasing in q
  absl::Status Validate() const;
};

class AcceptanceModel {
 public:
  static absl::StatusOr<AcceptanceModel> Create(AcceptanceModelOptions options = {});

  // Records a verified tree: `path` is VerifyResult::path, the accepted nodes
  // root first. INVALID_ARGUMENT when the path is not a root-first chain of
  // parent → child in `tree` (nothing is recorded then). `tree` must be
  // structurally valid (tree.Validate() passed before verification).
  absl::Status Observe(const TokenTree& tree, absl::Span<const int32_t> path);
  // Observe() for a whole step's trees (paths[i] for trees[i]), with one
  // recalibration at the end; all paths are checked first, and on an error
  // (INVALID_ARGUMENT naming paths[i]) nothing is recorded.
  absl::Status ObserveBatch(absl::Span<const TokenTree> trees,
                            absl::Span<const std::vector<int32_t>> paths);
  // One planned step of the batch, drafted or not (the UCB clock).
  void AdvanceRound();

  // a(q, depth): calibrated node-level estimate. depth >= 1.
  double NodeAcceptance(double q, int32_t depth) const;
  // a(depth, rank): shape-level estimate, plus the exploration bonus when
  // explore > 0 (capped at 1).
  double RankAcceptance(int32_t depth, int32_t rank, double explore = 0.0) const;

  // out: a [tree.num_nodes()] (a[0] = 1) and pi [tree.num_nodes()] (pi[0] = 1)
  // for a drafted tree, from q where draft[parent] is present and from the
  // rank otherwise; a sibling group whose estimates sum past 1 is scaled to 1.
  // Requires a structurally valid tree.
  void PathAcceptance(const TokenTree& tree, std::vector<double>* a, std::vector<double>* pi) const;

  // P(the accepted path reaches level d), d = 1..γ, for a tree of `shape`.
  std::vector<double> LevelReach(const TreeShape& shape, double explore = 0.0) const;
  // 1 + Σ LevelReach: expected tokens a step with this shape emits.
  double ExpectedTokens(const TreeShape& shape, double explore = 0.0) const;
  // Same for the fanouts prefix of length `depth` (a shape cut short by the
  // token budget); depth 0 gives 1.
  double ExpectedTokens(absl::Span<const int32_t> fanouts, double explore = 0.0) const;

  // Observed counts, for reports and tests.
  double rank_trials(int32_t depth, int32_t rank) const;
  double rank_accepted(int32_t depth, int32_t rank) const;
  int64_t rounds() const { return rounds_; }
  int64_t num_observed_trees() const { return num_trees_; }
  const AcceptanceModelOptions& options() const { return options_; }

 private:
  explicit AcceptanceModel(AcceptanceModelOptions options);
  static absl::Status CheckPath(const TokenTree& tree, absl::Span<const int32_t> path);
  // Counts one checked tree; returns the shallowest bucket it touched
  // (num buckets if none).
  int Record(const TokenTree& tree, absl::Span<const int32_t> path);
  int DepthBucket(int32_t depth) const;
  int QBin(double q) const;
  int RankDepth(int32_t depth) const;  // 1..kMaxShapeDepth → row 0..kMaxShapeDepth-1
  int RankCol(int32_t rank) const;
  void Count(double* accepted, double* trials, bool ok) const;
  void Recalibrate(int first_bucket);  // node-level curves of this bucket and deeper
  void RecalibrateRanks();

  AcceptanceModelOptions options_;
  // Node level: [bucket][bin].
  std::vector<double> q_accepted_, q_trials_, q_sum_;  // q_sum_: Σ q of trials, for bin means
  std::vector<double> q_curve_x_, q_curve_y_;          // calibrated curve per bucket
  std::vector<double> q_scale_;                        // [bucket] s_b of the prior s_b·q
  // [bucket][kLutSize + 1]: the curve sampled at q = k / kLutSize, so
  // NodeAcceptance is a lookup and one interpolation (the planner calls it
  // for every drafted node of every step).
  static constexpr int kLutSize = 256;
  std::vector<double> q_lut_;
  std::vector<int32_t> depth_bucket_;  // [kMaxTreeDepth + 1]
  // Shape level: [depth row][rank col].
  std::vector<double> r_accepted_, r_trials_, r_mean_;
  std::vector<double> rank_prior_;  // [max_rank] depth 1's prior, first·decay^r
  int64_t rounds_ = 0;
  int64_t num_trees_ = 0;
};

}  // namespace treespec
