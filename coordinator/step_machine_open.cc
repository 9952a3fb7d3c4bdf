// StepMachine: admission, the worker and drafter Opens, and the drafter
// catch-ups beside the steps (the design is in step_machine.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/step_machine_seq.h"

namespace treespec {

StepMachine::Admission StepMachine::Admit(std::vector<std::shared_ptr<RequestState>> arrivals,
                                          Clock::time_point now, bool drafter_may_try,
                                          bool drafter_reads_features) {
  Admission a;
  for (auto& req : arrivals) {
    absl::Status gone;
    if (req->cancelled()) {
      gone = absl::CancelledError("request cancelled while queued");
    } else if (req->deadline() && now > *req->deadline()) {
      gone = absl::DeadlineExceededError("deadline passed while queued");
    }
    if (!gone.ok()) {
      req->Finish(std::move(gone));
      if (options_.on_finish) options_.on_finish();
      continue;
    }
    auto s = std::make_unique<Seq>();
    s->req = req;
    s->id = options_.next_sequence_id();
    s->times.admitted = now;
    s->tel.Admit(options_.telemetry, *req, now);
    s->out = std::make_unique<SeqOutput>(req, options_.tokenizer);
    const GenerationRequest& g = req->request();
    // A sampled request keeps a per-sequence bandit: its seed must reproduce
    // its text, and the planner's choices depend on measured times and on
    // the other sequences (multi-round verification's output depends on the
    // tree). Its bandit has a plain arm and size-aware rewards with costs
    // frozen at start-up (sampled_bandit.h), so a useless drafter converges
    // to plain decoding within a few steps.
    const bool sampled = g.sampling.temperature > 0;
    if (g.auto_tree && sampled && !options_.bandit_shapes.empty()) {
      absl::StatusOr<SampledShapeBandit> b = SampledShapeBandit::Create(
          options_.bandit_shapes, sampled_costs_, options_.sampled_bandit);
      if (b.ok()) s->sampled_bandit = std::move(*b);
    } else if (g.auto_tree && !options_.plan_auto && !options_.bandit_shapes.empty()) {
      absl::StatusOr<UcbBandit> b = UcbBandit::Create(options_.bandit_shapes, options_.bandit);
      if (b.ok()) s->bandit = std::move(*b);
    }
    a.worker.push_back({s->id, g.prompt, g.sampling, g.seed,
                        static_cast<int32_t>(g.prompt.size()) + g.max_tokens,
                        options_.has_drafter && g.drafter != "none"});
    a.worker_tel.push_back(s->tel);
    if (options_.has_drafter && g.drafter != "none") {
      s->drafter = Seq::Drafter::kClosed;
      if (drafter_may_try && !DefersDrafter(*s)) {
        // While no tree pays, a greedy auto sequence steps (plainly) at
        // once: its Open serves a later check only, and what it decodes
        // meanwhile reaches the drafter as backlog. Waiting for the Open
        // kept each new sequence idle for a drafter prefill (a serial one
        // on a CPU the two share).
        s->drafter_first_open = drafter_reads_features || !PlainPreferredFor(*s);
        // A drafter reading the target's features (EAGLE) is opened once the
        // worker's prefill returned the prompt's (PlanDrafterOpens).
        if (!drafter_reads_features) {
          s->drafter = Seq::Drafter::kOpening;
          s->drafter_open_len = g.prompt.size();
          a.drafter.push_back({s->id, g.prompt, false});
          a.drafter_tel.push_back(s->tel);
        }
      }
    }
    seqs_.push_back(std::move(s));
  }
  return a;
}

void StepMachine::OnWorkerOpened(const std::vector<uint64_t>& ids,
                                 const absl::StatusOr<std::vector<WorkerOpenReply>>& replies,
                                 Clock::time_point now) {
  for (size_t i = 0; i < ids.size(); ++i) {
    Seq* s = Find(ids[i]);
    if (s == nullptr) continue;
    if (!replies.ok()) {
      // Unknown outcome: the worker may have opened it; the id is ours.
      s->worker = Seq::Worker::kFailed;
      s->worker_owned = true;
      if (!s->done && absl::IsUnavailable(replies.status()) && options_.reroute &&
          options_.reroute(s->req)) {
        s->done = true;  // another lane streams it now; Reap releases the id here
        if (options_.on_finish) options_.on_finish();
        continue;
      }
      Finish(s, absl::UnavailableError(absl::StrCat("worker ", options_.worker_name,
                                                    " failed: ", replies.status().message())));
      continue;
    }
    const WorkerOpenReply& r = (*replies)[i];
    if (!r.status.ok()) {
      s->worker = Seq::Worker::kFailed;  // not opened: nothing of ours to release
      Finish(s, r.status);
      continue;
    }
    s->worker = Seq::Worker::kLive;
    s->worker_owned = true;
    if (s->done) continue;  // cancelled while opening: Reap releases it
    s->tokens = s->req->request().prompt;
    s->tokens.push_back(r.first_token);
    s->times.first_token = now;
    s->times.last_token = now;
    const FinishReason f = s->out->Emit({r.first_token});
    if (f != FinishReason::kNone) {
      s->out->Final(f, s->totals, s->times);
      Finish(s, absl::OkStatus());
    }
  }
}

std::vector<DrafterOpenItem> StepMachine::PlanDrafterOpens(Clock::time_point now) {
  std::vector<DrafterOpenItem> items;
  for (auto& s : seqs_) {
    if (s->done || s->worker != Seq::Worker::kLive) continue;
    if (s->drafter != Seq::Drafter::kClosed && s->drafter != Seq::Drafter::kStale) continue;
    if (now < s->drafter_retry_at || s->catching_up) continue;
    // While plain is preferred, only new arrivals take the check's places
    // (Admit): opening a deferred sequence mid-stream would prefill its whole
    // context for trees nobody drafts.
    if (!s->drafter_first_open && PlainPreferredFor(*s)) continue;
    const bool stale = s->drafter == Seq::Drafter::kStale;
    s->drafter = Seq::Drafter::kOpening;
    s->drafter_open_len = s->tokens.size() - 1;
    items.push_back({s->id, std::vector<int32_t>(s->tokens.begin(), s->tokens.end() - 1), stale});
  }
  return items;
}

bool StepMachine::PlainPreferredFor(const Seq& s) const {
  const GenerationRequest& g = s.req->request();
  return g.auto_tree && options_.plan_auto && g.sampling.temperature == 0 &&
         !s.bandit.has_value() && planner_->Ready() && planner_->prefers_plain();
}

bool StepMachine::DefersDrafter(const Seq& s) const {
  if (!PlainPreferredFor(s)) return false;
  // Planned sequences with drafter state (sampled ones keep their own
  // bandit and never take part in the planner's checks).
  int64_t with_state = 0;
  for (const auto& o : seqs_) {
    const GenerationRequest& og = o->req->request();
    if (o->done || !og.auto_tree || og.sampling.temperature > 0 || o->bandit.has_value()) continue;
    with_state += o->drafter == Seq::Drafter::kOpening || o->drafter == Seq::Drafter::kOpen;
  }
  return with_state >= planner_->check_max_sequences();
}

void StepMachine::DrafterUnavailable() {
  for (auto& s : seqs_) {
    if (s->drafter == Seq::Drafter::kClosed) s->drafter_first_open = false;
  }
}

void StepMachine::OnDrafterOpened(const std::vector<uint64_t>& ids,
                                  const absl::StatusOr<std::vector<absl::Status>>& replies,
                                  Clock::time_point now) {
  for (size_t i = 0; i < ids.size(); ++i) {
    Seq* s = Find(ids[i]);
    if (s == nullptr || s->drafter != Seq::Drafter::kOpening) continue;
    s->drafter_first_open = false;
    if (!replies.ok()) {
      s->drafter = Seq::Drafter::kStale;  // unknown outcome; the id is ours
      s->drafter_owned = true;
      continue;
    }
    if (!(*replies)[i].ok()) {
      s->drafter = Seq::Drafter::kClosed;  // not opened under our id
      s->drafter_retry_at = now + options_.drafter_retry;
      continue;
    }
    s->drafter = Seq::Drafter::kOpen;
    s->drafter_owned = true;
    s->drafter_consumed = s->drafter_open_len;
    s->drafter_step = 1;
  }
}

std::vector<DraftItem> StepMachine::PlanCatchUps() {
  std::vector<DraftItem> items;
  if (options_.catch_up_tokens <= 0) return items;
  const bool feed_check = planner_->feeds_check();
  if (feed_check && fed_check_ != planner_->next_check()) {
    fed_check_ = planner_->next_check();
    fed_for_check_ = 0;
  }
  for (auto& s : seqs_) {
    if (!Stepping(*s)) continue;
    s->plain_run = s->rec.draft == DraftVerdict::kDrafted ? 0 : s->plain_run + 1;
    if (s->drafter != Seq::Drafter::kOpen || s->catching_up) continue;
    const GenerationRequest& g = s->req->request();
    if (g.sampling.temperature > 0 || s->plain_run < options_.catch_up_after_steps) continue;
    // While no tree pays, an auto sequence's catch-ups would only keep the
    // drafter busy beside the Verify (on a shared GPU or CPU that slows every
    // step: 0.64x plain at concurrency 64 on an H200, docs/gpu/
    // spec_bench_h200_2026-11-26.txt); once trees pay again, a catch-up
    // feeds the backlog. The exception: a check that will draft is a few
    // steps away (SpecPlanner::feeds_check), and as many sequences as it
    // drafts for are caught up, so that its Draft call is timed.
    const bool plain = PlainPreferredFor(*s);
    if (plain && !feed_check) continue;
    const size_t behind = s->tokens.size() - s->drafter_consumed;
    if (behind < static_cast<size_t>(options_.catch_up_tokens)) continue;
    // At most the check's number of sequences over its whole lead.
    if (plain && fed_for_check_ >= planner_->check_max_sequences()) continue;
    fed_for_check_ += plain;
    // All but the last token: the next Draft must bring at least one new
    // token (its root), and the catch-up may return before another step has
    // committed one (its reply is handled at the top of the next iteration).
    DraftItem d;
    d.id = s->id;
    d.step = s->drafter_step;
    d.new_tokens.assign(s->tokens.begin() + s->drafter_consumed, s->tokens.end() - 1);
    d.feature_begin = static_cast<int64_t>(s->drafter_consumed) - 1;
    d.catch_up = true;
    items.push_back(std::move(d));
    s->catching_up = true;
    s->catch_up_to = s->tokens.size() - 1;
  }
  return items;
}

void StepMachine::OnCaughtUp(const std::vector<uint64_t>& ids,
                             const absl::StatusOr<std::vector<absl::Status>>& results) {
  for (size_t i = 0; i < ids.size(); ++i) {
    Seq* s = Find(ids[i]);
    if (s == nullptr || !s->catching_up) continue;
    s->catching_up = false;
    if (s->done || s->drafter != Seq::Drafter::kOpen) continue;
    if (!results.ok() || i >= results->size() || !(*results)[i].ok()) {
      s->drafter = Seq::Drafter::kStale;  // its state is unknown: re-open
      continue;
    }
    s->drafter_step += 1;
    s->drafter_consumed = s->catch_up_to;
  }
}

}  // namespace treespec
