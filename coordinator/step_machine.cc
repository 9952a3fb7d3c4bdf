#include "coordinator/step_machine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/step_machine_seq.h"

namespace treespec {

std::optional<TreeShape> CapShape(const TreeShape& shape, int64_t remaining) {
  const int64_t depth = std::min<int64_t>(shape.Depth(), remaining - 1);
  if (depth <= 0) return std::nullopt;
  if (depth == shape.Depth()) return shape;
  std::vector<int32_t> f(shape.fanouts().begin(), shape.fanouts().begin() + depth);
  absl::StatusOr<TreeShape> s = TreeShape::FromFanouts(f);
  if (!s.ok()) return std::nullopt;
  return *s;
}

StepMachine::StepMachine(StepMachineOptions options)
    : options_(std::move(options)),
      planner_(std::make_unique<SpecPlanner>(
          SpecPlannerOptions{options_.bandit_shapes, options_.planner, {}})) {
  draft_ahead_ = options_.draft_ahead;
  draft_ahead_max_batch_ = options_.draft_ahead_max_batch;
  if (options_.verify_profile.has_value()) planner_->SetVerifyProfile(*options_.verify_profile);
  if (options_.draft_profile.has_value()) planner_->SetDraftProfile(*options_.draft_profile);
  sampled_costs_ = StepCostRatios::FromProfiles(options_.verify_profile, options_.draft_profile,
                                                options_.sampled_cost_batch);
}
StepMachine::~StepMachine() = default;

bool StepMachine::Stepping(const Seq& s) {
  return !s.done && s.worker == Seq::Worker::kLive && !s.drafter_first_open;
}

StepMachine::Seq* StepMachine::Find(uint64_t id) {
  for (auto& s : seqs_) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

void StepMachine::Finish(Seq* s, absl::Status status) {
  if (s->done) return;
  s->done = true;
  s->tel.Finish(status);
  s->req->Finish(std::move(status));
  if (options_.on_finish) options_.on_finish();
}

std::optional<TreeShape> StepMachine::ChooseShape(Seq* s) {
  const GenerationRequest& g = s->req->request();
  if (s->sampled_bandit.has_value()) {
    const std::optional<int> k = s->sampled_bandit->Select();
    if (!k.has_value()) return std::nullopt;  // plain: the drafter is not called
    s->rec.arm = *k;
    return s->sampled_bandit->arm(*k);
  }
  if (s->bandit.has_value()) {
    s->rec.arm = s->bandit->Select();
    return s->bandit->arm(s->rec.arm);
  }
  if (g.auto_tree && options_.plan_auto) return s->planned;
  return g.tree;
}

// The whole batch's trees at once: auto sequences get the planner's shape or
// none, fixed shapes are passed through so their cost is counted. Before the
// cost models have a prior (no step measured yet) auto sequences decode plainly.
void StepMachine::PlanAuto() {
  std::vector<Seq*> batch;
  std::vector<PlanSequence> plan_in;
  int num_auto = 0, num_greedy = 0;
  for (auto& s : seqs_) {
    if (!Stepping(*s)) continue;
    const GenerationRequest& g = s->req->request();
    s->planned.reset();
    PlanSequence p;
    p.context_tokens = static_cast<int64_t>(s->tokens.size());
    p.remaining_tokens = std::max<int64_t>(1, g.max_tokens - s->out->counted());
    p.draft_backlog = static_cast<int64_t>(s->tokens.size() - s->drafter_consumed);
    const bool planned = s->drafter == Seq::Drafter::kOpen && !s->bandit.has_value() &&
                         !s->sampled_bandit.has_value() && (g.auto_tree || g.tree.has_value());
    // A sequence catching up (PlanCatchUps) is planned plain this step.
    p.can_draft = planned && !s->catching_up;
    if (p.can_draft && !g.auto_tree) p.fixed_shape = g.tree;
    if (planned && g.auto_tree) {
      num_auto += p.can_draft;
      num_greedy += p.can_draft && g.sampling.temperature == 0;
    }
    // Without drafter state (deferred, or its Open in flight) while no tree
    // pays, a greedy auto sequence is plain by the planner's choice too.
    if ((planned && g.auto_tree) || PlainPreferredFor(*s)) {
      s->rec.planned = true;
      s->rec.expected_tokens = 1.0;
    }
    batch.push_back(s.get());
    plan_in.push_back(std::move(p));
  }
  if (num_auto == 0 || !planner_->Ready()) return;
  absl::StatusOr<ShapePlan> plan = planner_->Plan(plan_in, 2 * num_greedy >= num_auto);
  if (!plan.ok()) return;
  for (size_t i = 0; i < batch.size(); ++i) {
    Seq* s = batch[i];
    if (!s->rec.planned) continue;
    s->planned = plan->shapes[i];
    s->rec.expected_tokens = plan->expected_tokens[i];
  }
}

void StepMachine::OnStepTimes(double draft_seconds, double forward_seconds,
                              double verify_rpc_seconds, double step_seconds,
                              double draft_rpc_seconds) {
  if (draft_seconds > 0 && step_draft_.levels > 0 && !step_backlog_) {
    planner_->ObserveDraft(step_draft_, draft_seconds);
  }
  if (draft_rpc_seconds > draft_seconds && draft_seconds > 0) {
    const double overhead = draft_rpc_seconds - draft_seconds;
    draft_rpc_overhead_ =
        draft_rpc_overhead_ > 0 ? 0.9 * draft_rpc_overhead_ + 0.1 * overhead : overhead;
  }
  if (step_verify_.batch > 0) {
    if (step_draft_share_ >= 0.0) planner_->ObserveDraftShare(step_verify_.batch, step_draft_share_);
    planner_->ObserveVerify(step_verify_, forward_seconds, verify_rpc_seconds);
    if (step_planned_ && !step_backlog_) {
      planner_->ObserveStepRate(step_verify_.batch, step_committed_, step_seconds,
                                step_verify_.tree_tokens > step_verify_.batch);
    }
  }
  step_committed_ = 0;
  step_planned_ = false;
  step_backlog_ = false;
  step_verify_ = {};
  step_draft_ = {};
  step_draft_share_ = -1.0;
}

std::optional<DraftItem> StepMachine::DraftItemFor(Seq* s) {
  const GenerationRequest& g = s->req->request();
  if (s->drafter == Seq::Drafter::kNone) return std::nullopt;
  if (s->drafter != Seq::Drafter::kOpen) {
    // While no tree pays, a sequence without drafter state (deferred by
    // Admit, or opening for a check) decodes plainly by the planner's choice,
    // as it would with one: not a fallback in its stats and metrics.
    if (!PlainPreferredFor(*s)) s->rec.draft = DraftVerdict::kDrafterUnavailable;
    return std::nullopt;
  }
  if (s->catching_up) return std::nullopt;  // planned plain: PlanAuto left it out
  const std::optional<TreeShape> chosen = ChooseShape(s);
  if (!chosen.has_value()) return std::nullopt;
  // Stats and metrics name the chosen shape; the draft may be cut short.
  s->rec.tree = chosen->ToString();
  const std::optional<TreeShape> shape = CapShape(*chosen, g.max_tokens - s->out->counted());
  if (!shape.has_value()) {
    s->rec.draft = DraftVerdict::kBudget;
    return std::nullopt;
  }
  DraftItem d;
  d.id = s->id;
  d.step = s->drafter_step;
  d.new_tokens.assign(s->tokens.begin() + s->drafter_consumed, s->tokens.end());
  d.shape = shape->ToString();
  d.temperature = g.sampling.temperature;
  d.seed = g.seed;
  d.feature_begin = static_cast<int64_t>(s->drafter_consumed) - 1;
  s->step_shape = d.shape;
  return d;
}

std::vector<DraftItem> StepMachine::PlanDrafts() {
  std::vector<DraftItem> items;
  drafting_.clear();
  step_draft_ = {};
  for (auto& s : seqs_) {
    if (!Stepping(*s)) continue;
    s->rec = StepRecord{};
    s->rec.step = s->worker_step;
    s->candidate = -1;
  }
  if (options_.plan_auto) PlanAuto();
  std::vector<Seq*> hits;
  step_draft_share_ = -1.0;
  for (auto& s : seqs_) {
    if (!Stepping(*s)) continue;
    std::optional<DraftItem> d = DraftItemFor(s.get());
    if (d.has_value()) {
      // Draft-ahead: a candidate drafted for exactly this request is this
      // step's tree; otherwise the drafter drafts it now.
      s->rec.ahead_asked = s->ahead_asked && s->ahead_step == d->step;
      const int32_t c = MatchCandidate(*s, *d);
      if (c >= 0) {
        UseCandidate(s.get(), std::move(*d), c);
        hits.push_back(s.get());
      } else {
        items.push_back(std::move(*d));
        drafting_.push_back(s->id);
      }
    }
    // Candidates answer one step only.
    s->ahead_asked = false;
    s->ahead.clear();
  }
  if (!hits.empty()) {
    CreditHits(hits, items);
  } else if (!items.empty()) {
    step_draft_share_ = 1.0;
  }
  // A Draft call that also feeds long backlogs (the first drafted step after
  // a plain stretch) costs what the trees do not: the step teaches neither
  // the draft model nor the time factors (OnStepTimes).
  size_t fed = 0;
  for (const DraftItem& d : items) fed += d.new_tokens.size();
  step_backlog_ = !items.empty() && fed > kMaxMeanNewTokens * items.size();
  return items;
}

void StepMachine::ApplyDrafts(const absl::StatusOr<std::vector<DraftReply>>& replies) {
  for (size_t i = 0; i < drafting_.size(); ++i) {
    Seq* s = Find(drafting_[i]);
    if (s == nullptr || s->done) continue;
    if (!replies.ok() || i >= replies->size()) {
      s->rec.draft = DraftVerdict::kRpcFailed;
      s->drafter = Seq::Drafter::kStale;
      continue;
    }
    const DraftReply& r = (*replies)[i];
    if (!r.status.ok()) {
      s->rec.draft = DraftVerdict::kSequenceError;
      s->drafter = Seq::Drafter::kStale;
      continue;
    }
    // The drafter advanced over the new tokens whatever the tree looks like.
    s->drafter_step += 1;
    s->drafter_consumed = s->tokens.size();
    if (!r.tree_status.ok()) {
      s->rec.draft = DraftVerdict::kInvalidTree;
    } else if (r.num_nodes < 1 || r.root != s->tokens.back()) {
      s->rec.draft = DraftVerdict::kRootMismatch;
    } else {
      s->rec.draft = DraftVerdict::kDrafted;
      s->rec.nodes = r.num_nodes;
      s->draft_parents = r.parents;
      if (static_cast<int64_t>(r.parents.size()) == r.num_nodes) {
        std::vector<int32_t> depth(r.parents.size(), 0);
        int32_t deepest = 0;
        for (size_t v = 1; v < depth.size(); ++v) {
          depth[v] = depth[r.parents[v]] + 1;
          deepest = std::max(deepest, depth[v]);
        }
        step_draft_.levels = std::max<int64_t>(step_draft_.levels, deepest);
        step_draft_.seq_levels += deepest;
        step_draft_.nodes += r.num_nodes - 1;
        if (r.predraft_hit) {
          // What drafting this tree alone would have cost, less the answer's time.
          const double alone = planner_->draft().Predict({deepest, deepest, r.num_nodes - 1});
          s->rec.predraft_saved_seconds = std::max(0.0, alone - r.answer_ns * 1e-9);
        }
      }
      s->rec.predraft_hit = r.predraft_hit;
      s->tel.OnDraft(s->rec.tree, r.num_nodes);
      s->tel.OnPredraft(r.predraft_hit, s->rec.predraft_saved_seconds);
    }
  }
  drafting_.clear();
}

std::vector<VerifyItem> StepMachine::PlanVerify() {
  std::vector<VerifyItem> items;
  verifying_.clear();
  step_verify_ = {};
  step_committed_ = 0;
  step_planned_ = false;
  for (auto& s : seqs_) {
    if (!Stepping(*s)) continue;
    const bool drafted = s->rec.draft == DraftVerdict::kDrafted;
    if (!drafted) s->rec.nodes = 1;
    if (IsFallback(s->rec.draft)) s->tel.OnFallback(FallbackReason(s->rec.draft));
    if (IsDrafterError(s->rec.draft)) s->tel.OnDrafterError(FallbackReason(s->rec.draft));
    if (drafted && s->rec.ahead_asked) s->tel.OnDraftAhead(s->rec.ahead_hit, s->rec.ahead_saved_seconds);
    items.push_back({s->id, s->worker_step, s->tokens.back(), drafted,
                     drafted ? s->candidate : -1, s->req->request().mode, &s->tel});
    verifying_.push_back(s->id);
    step_planned_ |= s->rec.planned;
    step_verify_.batch += 1;
    step_verify_.tree_tokens += s->rec.nodes;
    step_verify_.context_tokens += static_cast<int64_t>(s->tokens.size());
  }
  return items;
}

void StepMachine::ApplyVerify(const absl::StatusOr<std::vector<VerifyReply>>& replies) {
  std::vector<TokenTree> greedy_trees, sampled_trees;
  std::vector<std::vector<int32_t>> greedy_paths, sampled_paths;
  for (size_t i = 0; i < verifying_.size(); ++i) {
    Seq* s = Find(verifying_[i]);
    if (s == nullptr || s->done) continue;
    if (!replies.ok()) {
      Finish(s, absl::UnavailableError(absl::StrCat("worker ", options_.worker_name,
                                                    " failed: ", replies.status().message())));
      continue;
    }
    if (i >= replies->size()) {
      Finish(s, absl::InternalError("worker answered out of order"));
      continue;
    }
    const VerifyReply& r = (*replies)[i];
    if (r.status.ok() && s->rec.draft == DraftVerdict::kDrafted && !r.accepted_nodes.empty() &&
        static_cast<int64_t>(s->draft_parents.size()) == s->rec.nodes) {
      const bool greedy = s->req->request().sampling.temperature == 0;
      TokenTree t;
      t.parents = std::move(s->draft_parents);
      t.tokens.resize(t.parents.size());
      for (size_t v = 0; v < t.tokens.size(); ++v) t.tokens[v] = static_cast<int32_t>(v);
      (greedy ? greedy_trees : sampled_trees).push_back(std::move(t));
      (greedy ? greedy_paths : sampled_paths).push_back(r.accepted_nodes);
    }
    if (!r.status.ok()) {
      Finish(s, r.status);
    } else if (r.tokens.empty()) {
      Finish(s, absl::InternalError("worker committed no token"));
    } else {
      Commit(s, r);
    }
  }
  verifying_.clear();
  planner_->ObserveTrees(greedy_trees, greedy_paths, true);
  planner_->ObserveTrees(sampled_trees, sampled_paths, false);
}

void StepMachine::Commit(Seq* s, const VerifyReply& r) {
  StepRecord& rec = s->rec;
  s->worker_step += 1;
  rec.committed = static_cast<int32_t>(r.tokens.size());
  step_committed_ += rec.committed;
  const bool drafted = rec.draft == DraftVerdict::kDrafted;
  if (drafted) {
    rec.accepted = r.num_accepted;
    if (s->bandit.has_value() && rec.arm >= 0) s->bandit->Update(rec.arm, r.num_accepted + 1);
  }
  if (s->sampled_bandit.has_value()) {
    if (drafted && rec.arm >= 0) {
      s->sampled_bandit->Update(rec.arm, r.num_accepted);
    } else {
      s->sampled_bandit->UpdatePlain();
    }
  }
  s->totals.Add(rec);
  s->tel.OnVerify(rec.nodes, drafted ? r.num_accepted : 0, drafted ? rec.tree : std::string());
  if (rec.planned) s->tel.OnPlanned(rec.nodes - 1, rec.expected_tokens, rec.committed);
  s->tokens.insert(s->tokens.end(), r.tokens.begin(), r.tokens.end());
  s->times.last_token = Clock::now();
  const FinishReason f = s->out->Emit(r.tokens);
  if (f == FinishReason::kNone) return;
  s->out->Final(f, s->totals, s->times);
  Finish(s, absl::OkStatus());
}

std::vector<SeqTelemetry*> StepMachine::Telemetry(const std::vector<uint64_t>& ids) {
  std::vector<SeqTelemetry*> out;
  for (uint64_t id : ids) {
    if (Seq* s = Find(id)) out.push_back(&s->tel);
  }
  return out;
}

StepMachine::Released StepMachine::Reap(Clock::time_point now) {
  Released rel;
  std::vector<std::unique_ptr<Seq>> keep;
  for (auto& s : seqs_) {
    if (!s->done) {
      if (s->req->cancelled()) {
        Finish(s.get(), absl::CancelledError("request cancelled"));
      } else if (s->req->deadline() && now > *s->req->deadline()) {
        Finish(s.get(), absl::DeadlineExceededError("request deadline exceeded"));
      }
    }
    // Ended, but an Open is still in flight: wait for it to learn what we own.
    if (!s->done || s->worker == Seq::Worker::kOpening || s->drafter == Seq::Drafter::kOpening) {
      keep.push_back(std::move(s));
      continue;
    }
    if (s->worker_owned) rel.worker.push_back(s->id);
    if (s->drafter_owned) rel.drafter.push_back(s->id);
  }
  seqs_ = std::move(keep);
  return rel;
}

void StepMachine::FinishAll(const absl::Status& status) {
  for (auto& s : seqs_) Finish(s.get(), status);
}

int64_t StepMachine::num_live() const {
  int64_t n = 0;
  for (const auto& s : seqs_) n += Stepping(*s);
  return n;
}

std::vector<std::shared_ptr<RequestState>> StepMachine::opening_requests() const {
  std::vector<std::shared_ptr<RequestState>> out;
  for (const auto& s : seqs_) {
    if (!s->done && !Stepping(*s)) out.push_back(s->req);
  }
  return out;
}

int64_t StepMachine::num_opening() const {
  int64_t n = 0;
  for (const auto& s : seqs_) n += !s->done && !Stepping(*s);
  return n;
}

}  // namespace treespec
