// StepMachine's draft-ahead: the drafter hop hidden (the protocol is in
// step_machine.h and proto/treespec/v1/drafter.proto, AheadSequence).
//
// Why a hit changes no output. A candidate is used only when it was drafted
// for exactly the Draft request the step would send: the same drafter step,
// new tokens (the outcome that happened), shape, temperature and seed. The
// drafter builds it with the code that answers that Draft, on a fork of the
// sequence's state that equals, bit for bit, the state the real commit of that
// outcome leaves (SequenceModel::ForkPath), so it IS that Draft's tree, q
// included, only drafted during the Verify before it (tests/unit/
// draft_ahead_test.cc checks this against a drafter that never drafts ahead).
// Greedy tokens and seeded samples (counter-based, keyed by seed, step and
// node) are therefore the same with and without draft-ahead, alone or in any
// batch. The commit that follows is a normal DraftSequence of that step, so
// the drafter advances by the same step numbers as without draft-ahead and a
// repeated commit is refused with ABORTED; when it fails, the drafter's
// state is unknown and the sequence re-opens (as after a failed Draft).
//
// Why the step waits for the candidates. The drafter answers calls one at a
// time: a Draft sent when the Verify returns but the candidates have not
// would queue behind them anyway, so waiting costs no more and usually
// returns a hit.
#include <algorithm>

#include "coordinator/step_machine_seq.h"

namespace treespec {

void StepMachine::AddDraftFeatures(const std::vector<int32_t>& parents,
                                   DraftStepFeatures* f) const {
  std::vector<int32_t> depth(parents.size(), 0);
  int32_t deepest = 0;
  for (size_t v = 1; v < depth.size(); ++v) {
    if (parents[v] < 0 || parents[v] >= static_cast<int32_t>(v)) return;
    depth[v] = depth[parents[v]] + 1;
    deepest = std::max(deepest, depth[v]);
  }
  f->levels = std::max<int64_t>(f->levels, deepest);
  f->seq_levels += deepest;
  f->nodes += static_cast<int64_t>(parents.size()) - (parents.empty() ? 0 : 1);
}

int32_t StepMachine::MatchCandidate(const Seq& s, const DraftItem& d) const {
  if (!s.ahead_asked || s.ahead_step != d.step || s.ahead_shape != d.shape) return -1;
  for (size_t j = 0; j < s.ahead.size(); ++j) {
    const AheadCandidateInfo& c = s.ahead[j];
    if (c.tree_status.ok() && c.num_nodes >= 1 && c.root == s.tokens.back() &&
        static_cast<int64_t>(c.parents.size()) == c.num_nodes && c.new_tokens == d.new_tokens) {
      return static_cast<int32_t>(j);
    }
  }
  return -1;
}

void StepMachine::UseCandidate(Seq* s, DraftItem d, int32_t candidate) {
  const AheadCandidateInfo& c = s->ahead[candidate];
  s->candidate = candidate;
  // The commit beside this step's Verify advances the drafter as the Draft
  // it replaces would have.
  s->drafter_step += 1;
  s->drafter_consumed = s->tokens.size();
  s->rec.draft = DraftVerdict::kDrafted;
  s->rec.nodes = c.num_nodes;
  s->rec.ahead_hit = true;
  s->draft_parents = c.parents;
  s->step_shape = d.shape;
  d.omit_tree = true;
  s->commit = std::move(d);
  s->tel.OnDraft(s->rec.tree, s->rec.nodes);
}

void StepMachine::CreditHits(const std::vector<Seq*>& hits, const std::vector<DraftItem>& misses) {
  DraftStepFeatures all, missed;
  for (const Seq* h : hits) AddDraftFeatures(h->draft_parents, &all);
  for (const DraftItem& m : misses) {
    absl::StatusOr<TreeShape> shape = TreeShape::Parse(m.shape);
    if (!shape.ok()) continue;
    for (DraftStepFeatures* f : {&all, &missed}) {
      f->levels = std::max<int64_t>(f->levels, shape->Depth());
      f->seq_levels += shape->Depth();
      f->nodes += shape->NumNodes() - 1;
    }
  }
  const DraftCostModel& model = planner_->draft();
  const double whole = model.Predict(all), paid = misses.empty() ? 0.0 : model.Predict(missed);
  step_draft_share_ = whole > 0 ? paid / whole : (misses.empty() ? 0.0 : 1.0);
  double saved = whole - paid;
  if (misses.empty()) saved += draft_rpc_overhead_;  // no Draft call at all
  const double share = std::max(0.0, saved) / static_cast<double>(hits.size());
  for (Seq* h : hits) h->rec.ahead_saved_seconds = share;
}

AheadPlan StepMachine::PlanAhead() {
  AheadPlan plan;
  committing_.clear();
  asking_.clear();
  int64_t drafted = 0;
  for (const auto& s : seqs_) drafted += Stepping(*s) && s->rec.draft == DraftVerdict::kDrafted;
  const bool ask = draft_ahead_ > 0 &&
                   (draft_ahead_max_batch_ <= 0 || drafted <= draft_ahead_max_batch_);
  for (auto& s : seqs_) {
    if (!Stepping(*s) || s->rec.draft != DraftVerdict::kDrafted) continue;
    if (s->candidate >= 0) {
      plan.commits.push_back(s->commit);
      committing_.push_back(s->id);
    }
    if (!ask || s->drafter != Seq::Drafter::kOpen) continue;
    const GenerationRequest& g = s->req->request();
    if (g.sampling.temperature > 0 && !options_.draft_ahead_sampled) continue;
    // This step commits a token at least, and a draft needs two more.
    if (g.max_tokens - s->out->counted() < 3) continue;
    // The guess for the next step's shape: this step's.
    plan.ahead.push_back({s->id, s->drafter_step, s->step_shape, g.sampling.temperature, g.seed,
                          draft_ahead_});
    asking_.push_back(s->id);
    s->ahead_asked = true;
    s->ahead_step = s->drafter_step;
    s->ahead_shape = s->step_shape;
  }
  return plan;
}

void StepMachine::ApplyAhead(const absl::StatusOr<AheadReplies>& replies, double wait_seconds) {
  for (size_t i = 0; i < committing_.size(); ++i) {
    Seq* s = Find(committing_[i]);
    if (s == nullptr || s->drafter != Seq::Drafter::kOpen) continue;
    const bool ok = replies.ok() && i < replies->commits.size() && replies->commits[i].ok();
    if (!ok) {
      // Whether the drafter committed is unknown: its state is stale.
      s->drafter = Seq::Drafter::kStale;
      s->rec.ahead_commit_failed = true;
      s->tel.OnDrafterError("ahead_commit_failed");
    }
  }
  // The call drafted every candidate as one batch: a sample of the drafter's
  // Draft cost like any other.
  DraftStepFeatures drafted;
  std::vector<Seq*> asked;
  for (size_t i = 0; i < asking_.size(); ++i) {
    Seq* s = Find(asking_[i]);
    if (s == nullptr) continue;
    asked.push_back(s);
    if (s->done || s->drafter != Seq::Drafter::kOpen || !replies.ok() ||
        i >= replies->ahead.size() || !replies->ahead[i].status.ok()) {
      continue;  // no candidates: the next step drafts normally
    }
    s->ahead = replies->ahead[i].candidates;
    for (const AheadCandidateInfo& c : s->ahead) AddDraftFeatures(c.parents, &drafted);
  }
  if (replies.ok() && drafted.levels > 0) planner_->ObserveDraft(drafted, replies->drafter_ns * 1e-9);
  for (const uint64_t id : committing_) {
    Seq* s = Find(id);
    if (s != nullptr && std::find(asked.begin(), asked.end(), s) == asked.end()) asked.push_back(s);
  }
  if (!asked.empty()) {
    const double share = wait_seconds / static_cast<double>(asked.size());
    for (Seq* s : asked) s->rec.ahead_wait_seconds = share;
    asked.front()->tel.OnDraftAheadWait(wait_seconds);
  }
  committing_.clear();
  asking_.clear();
}

}  // namespace treespec
