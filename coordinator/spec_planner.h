// SpecPlanner: the per-lane state that makes "auto" speculation pay — the
// acceptance models of the lane's drafter (one per verification rule: greedy
// and sampling), the verify and draft cost models, and the measured per-step
// overhead — around the pure planner of core/spec/tree_planner.h. The step
// machine (step_machine.h) asks it for each step's shapes (PlanShapes over
// the whole batch; a sequence may get none, and a step where none pays does
// not call the drafter) and feeds back every verified tree's accepted path and
// every step's measured times.
//
// Cost models from start-up profiles. The worker and the drafter profile
// themselves at start-up (worker/verify_profiler.h, drafter_service/
// draft_profiler.h) and the lane installs both here (SetVerifyProfile,
// SetDraftProfile) as the priors of the online refits, so plans use the
// device's real costs from the first planned step.
//
// Cost models before any profile. The planner must never think verify is
// free. Until a profile is installed (SetVerifyProfile) the verify model has
// no coefficients, so Ready() is false and every auto sequence decodes
// plainly; the first plain step's measured forward time s for batch B then
// seeds a conservative prior,
//   verify: per_step = s/2, per_sequence = 0, per_token = s/(2B)
// (a plain step of B costs s and every extra tree token half a sequence's
// share: about right on a CPU, pessimistic on a GPU; a per-sequence cost
// cannot be told from per_step until the batch size varies, so it starts at 0
// and every token, not the step, carries the batch's cost), and
//   draft:  per_call = s/4, per_sequence_level = s/(4B), per_node = s/(16B)
// (level costs scale with the batch: with chains the three features are
// collinear, and the prior decides the split),
// which the online refits (LinearTimeModel::Observe, window 256, prior worth
// 8 steps) then move to the measured times within a few dozen steps. The
// drafter's cost and acceptance can only be learned by calling it, and under
// the priors alone no tree pays, so the first `probe_steps` planned steps
// draft `probe` for every auto sequence (a few steps of speculation, paid once
// per lane); from then on the planner decides, and a drafter whose drafts are
// never accepted stops being called.
//
// The measured check. The models can be wrong in ways their own refits do
// not see: on a CPU shared with the drafter (its pre-drafting runs during
// the verify pass) or with other processes, a speculative step can take
// longer than the sum of its modelled parts, and acceptance estimates lag.
// So the lane also compares what it gets: per planned step, the realized
// rate committed tokens / step wall time, divided by the modelled plain rate
// B / T̂_plain(B) of the same batch (the division makes steps of different
// batch sizes comparable and cancels the plain model's own error), as an
// EMA for steps that speculated and for steps that did not. When both are
// known and speculation's is lower, the plan is turned into plain decoding;
// every `check_every` planned steps the other arm is taken once so neither
// estimate goes stale (a two-armed bandit on measured rates, with a fixed
// exploration share of 1/check_every). Its cost is bounded by that share:
// at most 1 step in check_every runs the worse arm.
//
// The UCB bandit's role is the exploration bonus on shape-level acceptance
// (PlannerOptions::explore): a drafter that looks useless is retried now and
// then as its discounted counts decay.
//
// Sampled requests are not planned here: their trees must not depend on
// measured times or on the rest of the batch (a seed reproduces the text,
// and a sampled step's output depends on its tree), so the step machine
// gives each its own SampledShapeBandit (core/spec/sampled_bandit.h), which
// has plain decoding as an arm and charges each shape its cost modelled from
// this lane's start-up profiles, frozen when the step machine is built.
//
// Thread-compatible: the lane thread calls everything.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/spec/acceptance_model.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/token_tree.h"
#include "core/spec/tree_planner.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct SpecPlannerOptions {
  std::vector<TreeShape> candidates;  // shapes "auto" chooses among
  PlannerOptions planner{.explore = 0.05};
  AcceptanceModelOptions acceptance;
  int probe_steps = 4;                                     // see the header comment
  // A plan speculates only when its predicted rate (without the exploration
  // bonus) beats plain decoding's by this factor: the models' errors (noisy
  // times, acceptance drift) must not turn a predicted gain into a loss.
  double min_gain = 1.1;
  // The verify model's context term is not used (context_tokens = 0 in plans
  // and observations): online, context grows together with the trees a
  // sequence is given, the fit cannot tell the two apart, and the term then
  // extrapolates to a large batch as a big constant that favours deep trees.
  // A start-up profile that varies context on its own can identify it.
  TreeShape probe = *TreeShape::FromFanouts({1, 1, 1});  // chain:3
  // The measured check (see the header comment): every `check_every`
  // planned steps the other arm (speculate / plain) is taken once, so both
  // realized rates stay current. 0: no check.
  int check_every = 16;
  double check_decay = 0.8;  // EMA weight of the old realized rate
};

class SpecPlanner {
 public:
  explicit SpecPlanner(SpecPlannerOptions options);

  // Whether the cost models have a prior (profile or first measured step).
  bool Ready() const { return ready_; }
  // Installs a start-up verify profile (e.g. from WorkerInfo) as the prior.
  void SetVerifyProfile(VerifyCostModel verify);
  // Installs a start-up draft profile (e.g. from DrafterInfo) as the prior.
  void SetDraftProfile(DraftCostModel draft);

  // One planned step (the acceptance models' UCB clock advances). `greedy`:
  // the batch is mostly greedy, so the greedy acceptance model plans it.
  absl::StatusOr<ShapePlan> Plan(absl::Span<const PlanSequence> batch, bool greedy);

  // A step's verified trees (structure only: parents) and their accepted paths.
  void ObserveTrees(absl::Span<const TokenTree> trees, absl::Span<const std::vector<int32_t>> paths,
                    bool greedy);
  // One verify pass: worker forward seconds, and the RPC's wall seconds (the
  // difference is this step's coordinator + RPC overhead).
  void ObserveVerify(const VerifyStepFeatures& f, double forward_seconds, double rpc_seconds);
  void ObserveDraft(const DraftStepFeatures& f, double seconds);
  // One planned step as measured: `batch` sequences committed `committed`
  // tokens in `wall_seconds` (draft + verify RPCs); `speculated`: some
  // sequence verified a drafted tree.
  void ObserveStepRate(int64_t batch, int64_t committed, double wall_seconds, bool speculated);
  // Realized rate over the modelled plain rate, speculative and plain steps
  // (0: none measured yet).
  double realized_spec_ratio() const { return realized_[1]; }
  double realized_plain_ratio() const { return realized_[0]; }

  const VerifyCostModel& verify() const { return verify_; }
  const DraftCostModel& draft() const { return draft_; }
  double overhead_seconds() const { return overhead_; }

 private:
  void SeedPrior(const VerifyStepFeatures& f, double seconds);
  // Whether the measured check turns this step's speculative plan plain (or,
  // on a check step, a plain plan speculative).
  bool CheckSaysPlain(bool plan_speculates);
  static void MakePlain(absl::Span<const PlanSequence> batch, ShapePlan* plan);

  SpecPlannerOptions options_;
  AcceptanceModel greedy_, sampling_;
  VerifyCostModel verify_;
  DraftCostModel draft_;
  bool ready_ = false;
  bool has_draft_prior_ = false;
  int probes_ = 0;  // probe steps planned
  double overhead_ = 0.0;  // EMA of verify RPC wall − forward time
  double realized_[2] = {0.0, 0.0};  // [speculated]: EMA of realized / modelled plain rate
  int64_t planned_ = 0;              // planned steps after the probes
};

}  // namespace treespec
