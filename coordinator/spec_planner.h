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
// The measured check: time calibration. The cost models are linear fits,
// and they are wrong in ways their own refits do not see: on a CPU shared
// with the drafter (its pre-drafting runs during the verify pass) or with
// other processes a speculative step takes longer than the sum of its
// modelled parts, and the fits extrapolate. On the CPU demo pair (after the
// CPU engine got faster) the draft model, refit on the small batches a run
// starts with, predicted 6-11 ms for a Draft call of 64 sequences that took
// 27-75 ms, and a 16-sequence step of depth-6 chains predicted at 30 ms took
// 46; plans predicted to beat plain decoding by 7-10% ran at 0.8x of it.
// So per batch-size bucket (powers of two) the planner measures two factors,
// as EMAs of bounded per-step samples:
//   kp = measured plain step time / modelled plain time, from plain steps;
//   km = (measured speculative step time − kp·modelled plain time)
//        / (modelled speculative time − modelled plain time),
// the error of what speculation adds to a step (tree tokens and drafting).
// Plans are made under the calibrated models, T' = kp·T_plain +
// km·(T − T_plain) (PlannerOptions::plain_time_scale, added_time_scale),
// so the factors change
// the shapes as well as the go / no-go: a km of 1.5 makes deep trees lose
// first. A bucket without measurements borrows the nearest measured
// bucket's factor (1 when none is). A plan speculates when its calibrated
// rate beats plain decoding's by min_gain. Check steps take the other arm,
// so the factors stay current: plain when the plan speculates, and otherwise
// the plan of the uncalibrated models when those say speculation pays, for at
// most check_max_sequences of the batch (the others decode plainly, so a
// check of a large batch costs a few trees, not a batch of them).
// While speculation is preferred, every `check_every`-th planned step is a
// check step. While plain is, the interval doubles after each speculative
// check, up to 16 * check_every: such a step can cost several plain steps
// (on the CPU demo pair a 16-sequence verify of depth-6 chains costs 4-5
// plain steps), so a drafter that keeps losing is retried ever more rarely;
// the interval returns to check_every as soon as speculation pays again.
//
// Draft-ahead (step_machine.h) takes a step's drafting off its critical path
// when every drafted sequence verifies a candidate the drafter prepared
// during the previous Verify. The draft model stays the cost of a Draft call
// (taught by Draft calls and by the draft-ahead calls, which draft the same
// way); per batch-size bucket the planner also keeps the share of that cost
// steps still wait for (ObserveDraftShare: the misses' call over the whole
// batch's, an EMA), and plans under it (PlannerOptions::draft_time_scale),
// so that a drafter whose next tree is usually ready is charged less for
// deeper trees. What the candidates' drafting costs the Verify beside it
// (shared cores) shows in the measured factor km.
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
  int probe_steps = 4;  // see the header comment
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
  // The measured check (see the header comment): check steps take the
  // other arm (speculate / plain) so both time factors stay current; every
  // `check_every` planned steps while speculating, backing off to 16 times
  // that while plain. 0: no check.
  int check_every = 16;
  // A check step taken while plain is preferred speculates for at most this
  // many sequences of the batch (those whose drafter is least behind, ties
  // from an offset that moves with each check), the rest decoding plainly:
  // its trees still teach the added
  // time factor (measured over what the plan added, however many trees), but
  // a check no longer costs a whole batch of trees. On the CPU demo pair at
  // concurrency 64, where no tree pays, four full checks in a 256-step run
  // cost 2-4% of plain decoding's rate.
  int check_max_sequences = 8;
  // While plain is preferred no catch-ups feed the drafter, so a check
  // step's Draft call would also feed each sequence everything committed
  // since the last check (16 to 256 tokens), and such a step is not timed
  // (StepMachine::PlanDrafts): checks taught acceptance but never the added
  // time factor, so a factor measured too high (or borrowed from another
  // batch size) kept plain decoding for good. On an H100 the Mamba demo
  // drafter at 16 clients ran at 0.87-0.91x plain in the rounds where that
  // happened and 1.17-1.43x in those where it did not. So this many planned
  // steps before a check that will draft, the planner says so
  // (feeds_check), and the step machine catches the drafter up for the
  // check's sequences: the check drafts with a short backlog and is timed.
  // 0: no lead.
  int check_lead = 4;
  // While plain is preferred, the decision is made again every this many
  // planned steps, and at once on a check step, after anything the planner
  // learns from speculation (acceptance, the added-time factor, the draft
  // model, a profile), when the batch's size or verification rule changes,
  // and when the calibrated plain step time has moved by more than
  // plain_replan_change of what it was at the last search (the verify fit
  // while young, the plain time factor); the steps between decode plainly
  // without the search over the candidate shapes, which cost 12 us a step
  // for one sequence with the default 13 shapes (1.4% of a 0.85 ms CPU demo
  // step) to find plain again. 1 or less: every step.
  int plain_replan_every = 8;
  double plain_replan_change = 0.05;
  double calibration_decay = 0.7;  // EMA weight of the old time factor
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
  // A drafted step of `batch` sequences waited for `share` (in [0, 1]) of its
  // modelled Draft call (1 without draft-ahead hits; see the header comment).
  void ObserveDraftShare(int64_t batch, double share);
  // That share for batches of `batch` (1 until measured; the nearest
  // measured bucket's otherwise).
  double draft_share(int64_t batch) const;
  // One planned step as measured: `batch` sequences committed `committed`
  // tokens in `wall_seconds` (draft + verify RPCs); `speculated`: some
  // sequence verified a drafted tree. Teaches the time factors when `batch`
  // is the last plan's.
  void ObserveStepRate(int64_t batch, int64_t committed, double wall_seconds, bool speculated);
  // The calibration of batches of `batch` (see the header comment): kp
  // (speculated = false) or km (true); the bucket's factor, else the nearest
  // measured bucket's, else 1.
  double time_factor(bool speculated, int64_t batch) const;

  // Whether the last planned step (after the probes; check steps aside)
  // found that no tree pays: the lane then decodes plainly, and the step
  // machine sends its auto sequences no catch-ups (StepMachine::PlanCatchUps).
  bool prefers_plain() const { return prefers_plain_; }
  // Planned steps (after the probes) that searched the candidate shapes;
  // the others kept plain decoding (SpecPlannerOptions::plain_replan_every).
  int64_t searches() const { return searches_; }
  // The most sequences a check step taken while plain speculates for.
  int check_max_sequences() const { return options_.check_max_sequences; }
  // Whether a check step that will draft is at most check_lead planned steps
  // away while plain is preferred (SpecPlannerOptions::check_lead): the
  // drafter's backlog of up to check_max_sequences sequences should be fed
  // before it.
  bool feeds_check() const { return feeds_check_ && prefers_plain_; }
  // The planned step of the next check (names the check feeds_check is for).
  int64_t next_check() const { return next_check_; }

  const VerifyCostModel& verify() const { return verify_; }
  const DraftCostModel& draft() const { return draft_; }
  double overhead_seconds() const { return overhead_; }

 private:
  void SeedPrior(const VerifyStepFeatures& f, double seconds);
  bool Pays(const ShapePlan& plan) const;
  // Whether this planned step keeps the last plan's plain decoding without
  // a search (SpecPlannerOptions::plain_replan_every).
  // `plain_seconds`: the calibrated plain step time of this batch now.
  bool KeepsPlain(absl::Span<const PlanSequence> batch, bool greedy, bool check_step,
                  double plain_seconds) const;
  // The sequences the `round`-th partial check step may speculate
  // (check_max_sequences of them; the others get can_draft = false).
  std::vector<PlanSequence> CheckSubset(absl::Span<const PlanSequence> batch, int64_t round) const;
  absl::StatusOr<ShapePlan> CalibratedPlan(absl::Span<const PlanSequence> batch,
                                           const AcceptanceModel& a, PlannerOptions o, double kp,
                                           double km) const;
  static void MakePlain(absl::Span<const PlanSequence> batch, ShapePlan* plan);
  static int Bucket(int64_t batch);

  SpecPlannerOptions options_;
  AcceptanceModel greedy_, sampling_;
  VerifyCostModel verify_;
  DraftCostModel draft_;
  bool ready_ = false;
  bool has_draft_prior_ = false;
  int probes_ = 0;                        // probe steps planned
  double overhead_ = 0.0;                 // EMA of verify RPC wall − forward time
  int64_t planned_ = 0;                   // planned steps after the probes
  bool prefers_plain_ = false;            // see prefers_plain()
  int64_t check_interval_ = 0;            // planned steps between check steps
  int64_t next_check_ = 0;                // the next check step's planned_
  int64_t checks_ = 0;                    // partial check steps planned
  int64_t lead_for_check_ = -1;           // next_check_ whose lead was planned
  bool feeds_check_ = false;              // see feeds_check()
  int64_t replan_at_ = 0;                 // planned_ of the next search while plain
  int64_t last_plan_batch_ = 0;           // batch size of the last search
  bool plan_greedy_ = true;               // its verification rule
  bool learned_ = true;                   // models changed since (see KeepsPlain)
  double plan_plain_seconds_ = 0.0;       // its calibrated plain step time
  int64_t searches_ = 0;                  // see searches()
  static constexpr int kBuckets = 12;     // batch 1, 2-3, 4-7, ..., >= 2048
  double time_factor_[2][kBuckets] = {};  // [km?][bucket]; 0: not measured
  double draft_share_[kBuckets] = {};     // [bucket]; < 0: not measured
  // The last plan's batch size (0: none to learn from), its modelled plain
  // step time and the modelled increment of what it ran over plain.
  int64_t last_batch_ = 0;
  double last_raw_plain_ = 0.0;
  double last_raw_marginal_ = 0.0;
};

}  // namespace treespec
