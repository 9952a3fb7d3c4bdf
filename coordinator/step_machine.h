// StepMachine: the speculative step loop of one lane as a state machine that
// speaks no RPC protos. The lane (lane.h) drives it and moves its plans over
// the wire through LaneRpc (lane_rpc.h):
//
//   Admit        → open items for the worker and the drafter (sent in parallel,
//                  off the step thread); OnWorkerOpened / OnDrafterOpened
//                  report back. A sequence streams its first token when its
//                  worker Open returns and joins the steps once its drafter
//                  Open has returned too (whatever the outcome), so its trees —
//                  and a seeded sample — never depend on which Open was faster.
//                  (While no tree pays, most greedy auto sequences open no
//                  drafter state; PlanDrafterOpens opens them later.)
//   PlanDrafts   → one draft item per sequence that gets a tree this step
//   ApplyDrafts  ← per item: status, node count, root token, validity
//   PlanVerify   → one verify item per live sequence (drafted or root-only)
//   PlanAhead    → what goes to the drafter beside the Verify (draft-ahead)
//   ApplyAhead   ← per commit a status, per ahead item the candidates
//   ApplyVerify  ← per item: status, committed tokens, accepted count;
//                  streams tokens, applies stops, updates the bandit
//   Reap         → the ids to release on the worker and on the drafter
//
// Draft-ahead: the drafter hop hidden (DESIGN.md; speculative speculative
// decoding, arXiv 2603.03251). Beside the Verify of step k, PlanAhead asks the
// drafter for the trees of each drafted sequence's next drafter step for the
// most likely outcomes of the tree being verified (AheadItem; the drafter's
// pre-drafting forks build them). When PlanDrafts of step k+1 finds that a
// candidate was drafted for exactly the request it would send (same step,
// new tokens, shape, temperature and seed), the sequence verifies that
// candidate (VerifyItem::candidate) without a Draft call — a hit — and that
// step's PlanAhead sends, beside its Verify, the commit that tells the drafter
// which outcome happened (DraftItem::omit_tree). A miss, a sequence without
// candidates, or a failed ahead call takes the normal Draft path. Drafters
// that read the target's features (EAGLE, ReDrafter heads) and the n-gram
// drafter report no ahead candidates and never take it.
//
// Each step fills one StepRecord per sequence (step_record.h) that feeds the
// request's SpeculationStats, the metrics and the spans.
//
// Ownership of remote state (so a failed Open never releases a sequence the
// caller does not own): a sequence is released on the worker iff its worker
// Open succeeded or its outcome is unknown (the RPC failed as a whole); a
// per-sequence Open error means the worker holds nothing of ours under that
// id. The same holds for the drafter.
//
// Failures: drafter failures fall back to root-only steps and the drafter is
// re-opened later (PlanDrafterOpens); a worker failure ends the sequences of
// the batch with UNAVAILABLE naming the worker, except requests that have
// streamed nothing yet: their failed Open hands them to `reroute` (another
// worker group), so that only the requests a dead group was serving fail.
//
// Drafters that read the target's features (EAGLE heads) need the prompt's,
// which only the worker's prefill computes: their Open waits for the worker
// Open (PlanDrafterOpens sends it with the features the client layer logged)
// instead of running beside it, and the sequence still steps only once it
// returned; if the drafter cannot be tried then, DrafterUnavailable lets it
// step without.
//
// Thread-compatible: one thread (the lane's) calls everything.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/spec/bandit.h"
#include "core/spec/sampled_bandit.h"
#include "core/spec/sampling.h"
#include "core/spec/tree_shape.h"
#include "core/spec/verify.h"
#include "core/tokenizer/tokenizer.h"
#include "coordinator/lane_telemetry.h"
#include "coordinator/request.h"
#include "coordinator/seq_output.h"
#include "coordinator/spec_planner.h"
#include "coordinator/step_record.h"

namespace treespec {

struct StepMachineOptions {
  std::vector<TreeShape> bandit_shapes;  // candidate shapes for speculation.tree = "auto"
  BanditOptions bandit;
  // "auto" plans every step's trees for the whole batch with SpecPlanner
  // (spec_planner.h; bandit_shapes are its candidates); false: a UCB bandit
  // per sequence over bandit_shapes, as before. Sampled requests
  // (temperature > 0) always use a per-sequence SampledShapeBandit
  // (core/spec/sampled_bandit.h: plain decoding is one of its arms, rewards
  // are size-aware, costs frozen from the profiles below), so that a seed
  // reproduces the text: the planner's choices depend on measured times and
  // on the rest of the batch, and a sampled step's outcome on its tree.
  bool plan_auto = true;
  SampledBanditOptions sampled_bandit;
  // The batch whose per-sequence plain cost the sampled bandits' cost ratios
  // are relative to (StepCostRatios::FromProfiles): a fixed constant, not the
  // live batch, so that a seed's text does not depend on concurrency. The
  // lane sets its largest batch (LaneOptions::max_batch), so a shape is
  // chosen only when it pays even in a full step, and a sampled request is
  // never slower than plain decoding at any load. That is the price of a
  // reproducible seed: where tree tokens are dear next to a step's fixed cost
  // (a CPU), sampled requests then decode plainly at every load. Measured
  // with 1 (spec_bench, temperature 1, CPU demo pair): mamba 1.26x at c=1 but
  // 0.90x at c=16, the EAGLE head 1.03x and 0.77x.
  int sampled_cost_batch = 1;
  PlannerOptions planner{.explore = 0.05};
  const Tokenizer* tokenizer = nullptr;         // text deltas; null: ids only
  CoordinatorTelemetry* telemetry = nullptr;    // null: no metrics or traces
  std::string worker_name = "worker";           // in UNAVAILABLE messages
  std::function<uint64_t()> next_sequence_id;   // required; unique across replicas
  std::function<void()> on_finish;              // once per request that ends; may be null
  // A request whose worker Open failed as a whole with UNAVAILABLE (the
  // worker group is down; nothing was streamed yet) is offered here before it
  // is failed: true means another worker group took it (the coordinator
  // re-submitted it) and this lane drops it without a final status (on_finish
  // still runs). Null, or false: it ends with UNAVAILABLE naming the worker.
  std::function<bool(const std::shared_ptr<RequestState>&)> reroute;
  bool has_drafter = true;                      // false: every sequence decodes plainly
  // After a drafter Open fails for a sequence, wait this long before retrying.
  std::chrono::milliseconds drafter_retry{500};
  // PlanCatchUps: a greedy sequence that decoded plainly for the last
  // catch_up_after_steps steps and whose drafter is catch_up_tokens or more
  // behind gets a catch-up; catch_up_tokens 0: never. A single plain step
  // among drafted ones (the planner's measured check) does not trigger one:
  // the sequence would then decode plainly until it returns.
  int32_t catch_up_tokens = 16;
  int32_t catch_up_after_steps = 8;
  // Start-up cost profiles of the lane's worker and drafter (WorkerInfo,
  // DrafterInfo), installed in the planner as its priors; unset: the
  // planner seeds its priors from the first measured step.
  std::optional<VerifyCostModel> verify_profile;
  std::optional<DraftCostModel> draft_profile;
  // Draft-ahead (see the header comment): candidates asked per sequence
  // beside each Verify; 0: off (set_draft_ahead changes it, e.g. once the
  // drafter said how many it gives).
  int32_t draft_ahead = 0;
  // Steps with more drafted sequences than this ask for no candidates (0: any
  // number). The drafter builds every candidate during the Verify: where it
  // shares cores with the worker that slows the Verify in proportion.
  int64_t draft_ahead_max_batch = 0;
  // Also for sampled sequences (temperature > 0), whose bonus token is rarely
  // guessed (about 2% on the demo models at T 1; greedy 67-87%).
  bool draft_ahead_sampled = false;
};

struct WorkerOpenItem {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t max_total_tokens = 0;
  bool with_drafter = false;  // the sequence drafts: ask for its drafter's features
};
struct WorkerOpenReply {
  absl::Status status;  // this sequence's result
  int32_t first_token = -1;
};
struct DrafterOpenItem {
  uint64_t id = 0;
  std::vector<int32_t> prompt;  // tokens the drafter consumes
  bool release_first = false;   // stale state may exist under this id
};
struct DraftItem {
  uint64_t id = 0;
  uint64_t step = 0;
  std::vector<int32_t> new_tokens;  // committed since the last draft; last = root
  std::string shape;  // TreeShape::ToString(), possibly cut to the token budget
  float temperature = 0;
  uint64_t seed = 0;
  // Drafters reading features: the position of the first row they need (the
  // one before new_tokens[0]); one row per new token.
  int64_t feature_begin = 0;
  // Consume new_tokens only (PlanCatchUps); `shape` is empty.
  bool catch_up = false;
  // Draft-ahead commit: the client layer already holds this tree (an ahead
  // candidate); the drafter commits the step but does not send it back.
  bool omit_tree = false;
};
// What the step machine needs of a drafted tree; the tree itself stays with
// the client layer (lane_rpc.h) and goes to the worker untouched.
struct DraftReply {
  absl::Status status;       // the drafter's status for this sequence
  absl::Status tree_status;  // whether the tree is well-formed (checked by the client layer)
  int64_t num_nodes = 0;
  int32_t root = -1;
  std::vector<int32_t> parents;  // the tree's structure, for the acceptance model
  bool predraft_hit = false;     // answered from a tree pre-drafted during the last verify
  int64_t answer_ns = 0;         // the drafter's time to answer this sequence
};
struct VerifyItem {
  uint64_t id = 0;
  uint64_t step = 0;
  int32_t root = -1;     // the sequence's last token
  bool drafted = false;  // verify the drafter's tree; else a root-only tree
  // Drafted from draft-ahead: the index of the sequence's ahead candidate
  // (held by the client layer) to verify; -1: the tree of this step's Draft.
  int32_t candidate = -1;
  std::optional<VerifyMode> mode;
  SeqTelemetry* tel = nullptr;
};
struct VerifyReply {
  absl::Status status;
  std::vector<int32_t> tokens;  // committed: accepted drafts then the bonus
  int32_t num_accepted = 0;
  std::vector<int32_t> accepted_nodes;  // accepted tree nodes, root first
};

// Draft-ahead: a sequence's next drafter step, asked for beside a Verify.
struct AheadItem {
  uint64_t id = 0;
  uint64_t step = 0;  // the drafter step the candidates are for
  std::string shape;
  float temperature = 0;
  uint64_t seed = 0;
  int32_t max_candidates = 0;
};
// What the machine needs of one candidate; the tree stays with the client
// layer, like a drafted one.
struct AheadCandidateInfo {
  std::vector<int32_t> new_tokens;  // the outcome it assumes (the next Draft's new_tokens)
  absl::Status tree_status;         // well-formed (checked by the client layer)
  int64_t num_nodes = 0;
  int32_t root = -1;
  std::vector<int32_t> parents;
};
struct AheadReply {
  absl::Status status;  // the drafter's status for this item
  std::vector<AheadCandidateInfo> candidates;
};
// What goes to the drafter beside a Verify, as one Draft call.
struct AheadPlan {
  std::vector<DraftItem> commits;  // the candidates this step verifies (omit_tree)
  std::vector<AheadItem> ahead;
  bool empty() const { return commits.empty() && ahead.empty(); }
};
struct AheadReplies {
  std::vector<absl::Status> commits;  // one per AheadPlan::commits
  std::vector<AheadReply> ahead;      // one per AheadPlan::ahead
  int64_t drafter_ns = 0;             // the drafter's reported time for the call
};

class StepMachine {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepMachine(StepMachineOptions options);
  ~StepMachine();

  // ---- admission
  struct Admission {
    std::vector<WorkerOpenItem> worker;
    std::vector<DrafterOpenItem> drafter;
    std::vector<SeqTelemetry> worker_tel, drafter_tel;  // copies for the open RPCs' spans
  };
  // Requests cancelled or past their deadline end here; the others get ids
  // and open items. `drafter_may_try`: open on the drafter now too.
  // `drafter_reads_features`: the lane's drafter reads the target's features
  // (its Open then waits for the worker's, see above).
  Admission Admit(std::vector<std::shared_ptr<RequestState>> arrivals, Clock::time_point now,
                  bool drafter_may_try, bool drafter_reads_features = false);
  // The worker Open of `ids` returned: `replies` has one entry per id, or the
  // RPC failed as a whole.
  void OnWorkerOpened(const std::vector<uint64_t>& ids,
                      const absl::StatusOr<std::vector<WorkerOpenReply>>& replies,
                      Clock::time_point now);
  // Live sequences without drafter state that should (re)open on the drafter.
  // While the planner finds that no tree pays, an arriving greedy auto
  // sequence opens on the drafter only while fewer than its
  // check_max_sequences have drafter state (Admit); the others would be
  // drafter work (prefill, release) for trees nobody drafts — a drafter whose
  // drafts are useless cost 3-6% of plain decoding's rate at 4-16 clients on
  // the CPU that way. A deferred sequence stays closed while plain is
  // preferred (opening it mid-stream would prefill its whole context); once
  // trees pay again (a check found it, or the load fell) it opens with its
  // whole context and decodes plainly until the Open returns.
  std::vector<DrafterOpenItem> PlanDrafterOpens(Clock::time_point now);
  // The drafter cannot be tried now: sequences waiting for their first
  // drafter Open step without it (they re-open later).
  void DrafterUnavailable();
  void OnDrafterOpened(const std::vector<uint64_t>& ids,
                       const absl::StatusOr<std::vector<absl::Status>>& replies,
                       Clock::time_point now);

  // ---- one step
  std::vector<DraftItem> PlanDrafts();
  // `replies`: one per planned item, or the RPC's failure.
  void ApplyDrafts(const absl::StatusOr<std::vector<DraftReply>>& replies);
  std::vector<VerifyItem> PlanVerify();
  // Draft-ahead, after PlanVerify: the commits of the candidates this step
  // verifies and the ahead items, for one Draft call beside the Verify.
  AheadPlan PlanAhead();
  // Its replies (or the call's failure), before ApplyVerify. `wait_seconds`:
  // how long the step waited for them after its Verify had returned.
  void ApplyAhead(const absl::StatusOr<AheadReplies>& replies, double wait_seconds);
  void ApplyVerify(const absl::StatusOr<std::vector<VerifyReply>>& replies);
  // Draft-ahead's settings now (StepMachineOptions::draft_ahead and
  // draft_ahead_max_batch), e.g. once the drafter said what it gives.
  void set_draft_ahead(int32_t max_candidates, int64_t max_batch) {
    draft_ahead_ = max_candidates;
    draft_ahead_max_batch_ = max_batch;
  }
  // Measured times of the step just applied: the Draft call (the drafter's
  // reported time, else the RPC's; 0 when not called), the worker's forward
  // pass, the Verify RPC's wall time and the step's time (draft + verify).
  // Feeds the planner's cost models and its measured check.
  // `draft_rpc_seconds`: the Draft call's wall time (0 when not called),
  // for the time draft-ahead hits save.
  void OnStepTimes(double draft_seconds, double forward_seconds, double verify_rpc_seconds,
                   double step_seconds, double draft_rpc_seconds = 0);
  const SpecPlanner& planner() const { return *planner_; }

  // ---- drafter catch-up, beside the steps
  // Call once per step, after ApplyVerify.
  // Greedy sequences that decoded plainly while their drafter fell behind by
  // at least StepMachineOptions::catch_up_tokens: items that only feed the
  // drafter the backlog (DraftItem::catch_up), for the lane to send off its
  // step thread. Without them the Draft that resumes speculation first feeds
  // the whole backlog, every sequence's at once, inside a step (tens of ms
  // after a long plain stretch). A sequence catching up decodes plainly until
  // OnCaughtUp. Sampled sequences never catch up this way: whether the
  // catch-up returned before their next step would change their trees, and
  // so a seeded sample. Nor do auto sequences while the planner finds that
  // no tree pays (SpecPlanner::prefers_plain), except, a few steps before a
  // check step that will draft (SpecPlanner::feeds_check), up to the check's
  // number of them, so that the check's Draft call is timed.
  std::vector<DraftItem> PlanCatchUps();
  // The catch-up of `ids` returned: one status per id, or the RPC's failure
  // (the drafter's state is then unknown: re-open later).
  void OnCaughtUp(const std::vector<uint64_t>& ids,
                  const absl::StatusOr<std::vector<absl::Status>>& results);
  // Telemetry of the planned items' sequences (for BatchRpcTrace).
  std::vector<SeqTelemetry*> Telemetry(const std::vector<uint64_t>& ids);

  // ---- clean-up
  struct Released {
    std::vector<uint64_t> worker, drafter;
  };
  // Ends cancelled and expired sequences, drops ended ones whose opens have
  // returned, and says which ids to release where.
  Released Reap(Clock::time_point now);
  // Ends every sequence (shutdown, with `status`).
  void FinishAll(const absl::Status& status);

  int64_t num_live() const;     // stepping
  int64_t num_opening() const;  // not ended and not stepping yet: an Open in flight
  // The requests of those sequences.
  std::vector<std::shared_ptr<RequestState>> opening_requests() const;
  int64_t size() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct Seq;
  static bool Stepping(const Seq& s);
  Seq* Find(uint64_t id);
  void Finish(Seq* s, absl::Status status);
  void Commit(Seq* s, const VerifyReply& r);
  std::optional<TreeShape> ChooseShape(Seq* s);
  void PlanAuto();
  // Whether `s` is a planned (greedy auto) sequence while the planner finds
  // that no tree pays.
  bool PlainPreferredFor(const Seq& s) const;
  // Whether `s`, arriving, opens no drafter state: PlainPreferredFor, and a
  // check's worth of planned sequences have drafter state already (see
  // PlanDrafterOpens).
  bool DefersDrafter(const Seq& s) const;
  // This step's draft request of `s`, or none (its record says why).
  std::optional<DraftItem> DraftItemFor(Seq* s);
  // Draft-ahead (step_machine_ahead.cc): the index of `s`'s candidate for
  // exactly `d`, or -1; UseCandidate makes it this step's tree.
  int32_t MatchCandidate(const Seq& s, const DraftItem& d) const;
  void UseCandidate(Seq* s, DraftItem d, int32_t candidate);
  // The drafting time this step's hits saved (`misses`: the Draft call it
  // makes), shared among them.
  void CreditHits(const std::vector<Seq*>& hits, const std::vector<DraftItem>& misses);
  // What drafting `parents`' tree adds to a call (levels, seq-levels, nodes).
  void AddDraftFeatures(const std::vector<int32_t>& parents, DraftStepFeatures* f) const;

  const StepMachineOptions options_;
  std::vector<std::unique_ptr<Seq>> seqs_;      // in admission order
  std::vector<uint64_t> drafting_, verifying_;     // the items of the step in flight
  std::unique_ptr<SpecPlanner> planner_;
  StepCostRatios sampled_costs_;  // frozen at construction from the profiles
  VerifyStepFeatures step_verify_;  // the step in flight, for the cost models
  DraftStepFeatures step_draft_;
  int64_t step_committed_ = 0;  // tokens committed by the step in flight
  bool step_planned_ = false;   // some sequence of it was planned by "auto"
  // Its Draft call fed backlogs: more than kMaxMeanNewTokens new tokens per
  // drafted sequence on average (PlanDrafts; a step's accepted path and bonus
  // token are at most a tree's depth + 1).
  bool step_backlog_ = false;
  // Catch-ups sent for the check at planned step fed_check_ (PlanCatchUps).
  int64_t fed_check_ = -1;
  int fed_for_check_ = 0;
  static constexpr size_t kMaxMeanNewTokens = 16;
  int32_t draft_ahead_ = 0;     // StepMachineOptions::draft_ahead, as set now
  int64_t draft_ahead_max_batch_ = 0;
  // The share of this step's modelled Draft call it still waits for (-1:
  // nothing drafted), for SpecPlanner::ObserveDraftShare.
  double step_draft_share_ = -1.0;
  std::vector<uint64_t> committing_, asking_;  // the AheadPlan in flight
  // EMA of a Draft call's wall time beyond the drafter's reported time (the
  // RPC round trip a step without a Draft call saves); 0: none measured.
  double draft_rpc_overhead_ = 0.0;
};

}  // namespace treespec
