#include "coordinator/lane.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "coordinator/lane_telemetry.h"
#include "rpc/proto_convert.h"
#include "rpc/status_convert.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStopToken: return v1::FINISH_REASON_STOP;
    case FinishReason::kStopString: return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}

// The shape truncated so a step never drafts past the token budget: a step
// emits at most depth + 1 tokens.
std::optional<TreeShape> CapShape(const TreeShape& shape, int64_t remaining) {
  const int64_t depth = std::min<int64_t>(shape.Depth(), remaining - 1);
  if (depth <= 0) return std::nullopt;
  if (depth == shape.Depth()) return shape;
  std::vector<int32_t> f(shape.fanouts().begin(), shape.fanouts().begin() + depth);
  absl::StatusOr<TreeShape> s = TreeShape::FromFanouts(f);
  if (!s.ok()) return std::nullopt;
  return *s;
}

}  // namespace

struct Lane::Seq {
  std::shared_ptr<RequestState> req;
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt + committed completion (last = pending)
  uint64_t worker_step = 1;
  // Drafter side.
  bool drafter_open = false;
  bool drafter_stale = false;  // state may exist on the drafter: release before reopening
  uint64_t drafter_step = 1;
  std::vector<int32_t> undrafted;  // committed tokens not yet sent; last = root
  std::optional<UcbBandit> bandit;
  // Output.
  int32_t counted = 0;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::optional<StopStringMatcher> stops;
  // Stats.
  int32_t steps = 0, drafted = 0, accepted = 0, fallback_steps = 0;
  std::string last_tree = "none";
  Clock::time_point admitted, first_token, last_token;
  bool done = false;
  SeqTelemetry tel;  // metrics and trace spans (lane_telemetry.h)
};

Lane::Lane(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneOptions options)
    : worker_(worker), drafter_(drafter), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

Lane::~Lane() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Lane::Add(std::shared_ptr<RequestState> request) {
  absl::MutexLock lock(&mu_);
  arrivals_.push_back(std::move(request));
}

int64_t Lane::load() const {
  absl::MutexLock lock(&mu_);
  return live_count_ + static_cast<int64_t>(arrivals_.size());
}

int64_t Lane::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(arrivals_.size());
}

LaneStepStats Lane::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Lane::Run() {
  while (true) {
    std::vector<std::shared_ptr<RequestState>> arrivals;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !arrivals_.empty();
      };
      if (live_.empty()) mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      if (stop_) break;
      const size_t room = live_.size() < static_cast<size_t>(options_.max_batch)
                              ? options_.max_batch - live_.size()
                              : 0;
      const size_t take = std::min(room, arrivals_.size());
      arrivals.assign(arrivals_.begin(), arrivals_.begin() + take);
      arrivals_.erase(arrivals_.begin(), arrivals_.begin() + take);
    }
    const Clock::time_point t0 = Clock::now();
    if (!arrivals.empty()) Admit(std::move(arrivals));
    Reap();
    if (!live_.empty()) {
      ReopenDrafts();
      Step();
      Reap();
      absl::MutexLock lock(&mu_);
      stats_.loop_ns += Ns(Clock::now() - t0);
    }
    absl::MutexLock lock(&mu_);
    live_count_ = static_cast<int64_t>(live_.size());
  }
  for (auto& s : live_) FinishSeq(s.get(), absl::UnavailableError("coordinator is shutting down"));
  Reap();
}

void Lane::Admit(std::vector<std::shared_ptr<RequestState>> arrivals) {
  const Clock::time_point now = Clock::now();
  v1::WorkerOpenRequest open;
  std::vector<std::unique_ptr<Seq>> fresh;
  for (auto& req : arrivals) {
    absl::Status gone;
    if (req->cancelled()) {
      gone = absl::CancelledError("request cancelled while queued");
    } else if (req->deadline() && now > *req->deadline()) {
      gone = absl::DeadlineExceededError("deadline passed while queued");
    }
    if (!gone.ok()) {
      req->Finish(std::move(gone));
      worker_->health.AddLoad(-1);
      if (drafter_ != nullptr) drafter_->health.AddLoad(-1);
      continue;
    }
    auto seq = std::make_unique<Seq>();
    seq->req = req;
    seq->id = options_.next_sequence_id->fetch_add(1);
    seq->admitted = now;
    seq->tel.Admit(options_.telemetry, *req, now);
    const GenerationRequest& g = req->request();
    if (options_.tokenizer != nullptr) {
      seq->detok = std::make_unique<IncrementalDetokenizer>(options_.tokenizer);
    }
    seq->stops = *StopStringMatcher::Create(g.stop_strings);
    if (g.auto_tree && !options_.bandit_shapes.empty()) {
      absl::StatusOr<UcbBandit> b = UcbBandit::Create(options_.bandit_shapes, options_.bandit);
      if (b.ok()) seq->bandit = std::move(*b);
    }
    v1::WorkerOpenSequence* ws = open.add_sequences();
    ws->set_sequence_id(seq->id);
    ws->mutable_prompt()->Assign(g.prompt.begin(), g.prompt.end());
    ToProto(g.sampling, g.seed, ws->mutable_sampling());
    ws->set_max_total_tokens(static_cast<int32_t>(g.prompt.size()) + g.max_tokens);
    fresh.push_back(std::move(seq));
  }
  if (fresh.empty()) return;
  BatchRpcTrace prefill_trace(options_.telemetry, "prefill", fresh);
  absl::StatusOr<v1::WorkerOpenResponse> resp = worker_->client->Open(open, options_.open_timeout);
  prefill_trace.End(resp.status());
  if (!resp.ok()) {
    worker_->health.MarkFailed(Clock::now());
    for (auto& s : fresh) {
      FinishSeq(s.get(), absl::UnavailableError(absl::StrCat("worker ", worker_->name,
                                                             " failed: ", resp.status().message())));
    }
    return;
  }
  worker_->health.MarkHealthy();
  for (size_t i = 0; i < fresh.size(); ++i) {
    Seq* s = fresh[i].get();
    absl::Status st = i < static_cast<size_t>(resp->results_size())
                          ? FromProto(resp->results(i).status())
                          : absl::InternalError("worker returned too few results");
    if (!st.ok()) {
      FinishSeq(s, st);
      continue;
    }
    const GenerationRequest& g = s->req->request();
    const int32_t first = resp->results(i).first_token();
    s->tokens = g.prompt;
    s->tokens.push_back(first);
    s->undrafted = {first};
    s->first_token = Clock::now();
    s->last_token = s->first_token;
    s->drafter_open = false;
    Emit(s, {first});
  }
  for (auto& s : fresh) live_.push_back(std::move(s));
}

void Lane::ReopenDrafts() {
  if (drafter_ == nullptr) return;
  const Clock::time_point now = Clock::now();
  if (!drafter_->health.MayTry(now)) return;
  v1::ReleaseDraftsRequest release;
  v1::DrafterOpenRequest open;
  std::vector<Seq*> who;
  for (auto& s : live_) {
    if (s->done || s->drafter_open || s->req->request().drafter == "none") continue;
    if (s->drafter_stale) release.add_sequence_ids(s->id);
    v1::DrafterOpenSequence* o = open.add_sequences();
    o->set_sequence_id(s->id);
    o->mutable_prompt()->Assign(s->tokens.begin(), s->tokens.end() - 1);
    who.push_back(s.get());
  }
  if (who.empty()) return;
  if (release.sequence_ids_size() > 0) {
    (void)drafter_->client->Release(release, options_.draft_timeout);
  }
  BatchRpcTrace open_trace(options_.telemetry, "drafter_open", who);
  absl::StatusOr<v1::DrafterOpenResponse> resp =
      drafter_->client->Open(open, options_.open_timeout);
  open_trace.End(resp.status());
  if (!resp.ok()) {
    drafter_->health.MarkFailed(Clock::now());
    for (Seq* s : who) s->drafter_stale = true;
    return;
  }
  drafter_->health.MarkHealthy();
  for (size_t i = 0; i < who.size(); ++i) {
    Seq* s = who[i];
    const bool ok = i < static_cast<size_t>(resp->results_size()) &&
                    resp->results(i).status().code() == 0;
    s->drafter_stale = !ok;
    if (!ok) continue;
    s->drafter_open = true;
    s->drafter_step = 1;
    s->undrafted = {s->tokens.back()};
  }
}

void Lane::Step() {
  // ---- draft: one batched RPC for every sequence with drafter state.
  std::map<uint64_t, TokenTree> trees;
  std::map<uint64_t, int> arms;
  std::map<uint64_t, std::string> shapes;
  // Sequences whose last token leaves no room for a draft: a plain step by
  // choice, not a fallback.
  std::set<uint64_t> budget_spent;
  v1::DraftRequest dreq;
  std::vector<Seq*> drafting;
  for (auto& s : live_) {
    if (s->done || !s->drafter_open) continue;
    const GenerationRequest& g = s->req->request();
    const int64_t remaining = g.max_tokens - s->counted;
    std::optional<TreeShape> shape;
    int arm = -1;
    if (s->bandit.has_value()) {
      arm = s->bandit->Select();
      shape = s->bandit->arm(arm);
    } else {
      shape = g.tree;
    }
    if (!shape.has_value()) continue;
    // Stats and metrics name the chosen shape; the draft may be cut short.
    const std::string chosen = shape->ToString();
    shape = CapShape(*shape, remaining);
    if (!shape.has_value()) {
      budget_spent.insert(s->id);
      continue;
    }
    arms[s->id] = arm;
    shapes[s->id] = chosen;
    v1::DraftSequence* d = dreq.add_sequences();
    d->set_sequence_id(s->id);
    d->set_step(s->drafter_step);
    d->mutable_new_tokens()->Assign(s->undrafted.begin(), s->undrafted.end());
    d->set_tree(shape->ToString());
    d->set_temperature(g.sampling.temperature);
    d->set_seed(g.seed);
    drafting.push_back(s.get());
  }
  if (!drafting.empty()) {
    BatchRpcTrace draft_trace(options_.telemetry, "draft", drafting);
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<v1::DraftResponse> resp = drafter_->client->Draft(dreq, options_.draft_timeout);
    draft_trace.End(resp.status());
    {
      absl::MutexLock lock(&mu_);
      stats_.draft_ns += Ns(Clock::now() - t0);
      if (resp.ok()) stats_.drafter_reported_ns += resp->draft_ns();
    }
    if (!resp.ok()) {
      drafter_->health.MarkFailed(Clock::now());
      for (Seq* s : drafting) {
        s->drafter_open = false;
        s->drafter_stale = true;
      }
    } else {
      drafter_->health.MarkHealthy();
      for (size_t i = 0; i < drafting.size(); ++i) {
        Seq* s = drafting[i];
        const bool ok = i < static_cast<size_t>(resp->results_size()) &&
                        resp->results(i).sequence_id() == s->id &&
                        resp->results(i).status().code() == 0;
        if (!ok) {
          s->drafter_open = false;
          s->drafter_stale = true;
          continue;
        }
        trees[s->id] = FromProto(resp->results(i).tree());
        s->tel.OnDraft(shapes[s->id], trees[s->id].num_nodes());
        s->drafter_step += 1;
        s->undrafted.clear();
      }
    }
  }
  // ---- verify: one batched RPC for every live sequence.
  v1::VerifyRequest vreq;
  std::vector<Seq*> verifying;
  for (auto& s : live_) {
    if (s->done) continue;
    v1::SequenceStep* st = vreq.add_steps();
    st->set_sequence_id(s->id);
    st->set_step(s->worker_step);
    auto it = trees.find(s->id);
    if (it != trees.end() && it->second.num_nodes() > 0 && it->second.tokens[0] == s->tokens.back()) {
      ToProto(it->second, st->mutable_tree());
    } else {
      if (it != trees.end()) trees.erase(it);
      st->mutable_tree()->add_tokens(s->tokens.back());
      st->mutable_tree()->add_parents(-1);
      if (s->req->request().drafter != "none" && !budget_spent.count(s->id)) {
        s->fallback_steps += 1;
        s->tel.OnFallback();
      }
    }
    if (s->req->request().mode.has_value()) st->set_mode(ToProto(*s->req->request().mode));
    verifying.push_back(s.get());
  }
  if (verifying.empty()) return;
  BatchRpcTrace verify_trace(options_.telemetry, "verify", verifying);
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<v1::VerifyResponse> resp = worker_->client->Verify(vreq, options_.verify_timeout);
  verify_trace.End(resp.status());
  {
    absl::MutexLock lock(&mu_);
    stats_.steps += 1;
    stats_.verify_ns += Ns(Clock::now() - t0);
    if (resp.ok()) stats_.worker_forward_ns += resp->forward_ns();
  }
  if (!resp.ok()) {
    worker_->health.MarkFailed(Clock::now());
    for (Seq* s : verifying) {
      FinishSeq(s, absl::UnavailableError(absl::StrCat("worker ", worker_->name,
                                                       " failed: ", resp.status().message())));
    }
    return;
  }
  worker_->health.MarkHealthy();
  for (size_t i = 0; i < verifying.size(); ++i) {
    Seq* s = verifying[i];
    if (i >= static_cast<size_t>(resp->results_size()) || resp->results(i).sequence_id() != s->id) {
      FinishSeq(s, absl::InternalError("worker answered out of order"));
      continue;
    }
    const v1::StepResult& r = resp->results(i);
    absl::Status st = FromProto(r.status());
    if (!st.ok()) {
      FinishSeq(s, st);
      continue;
    }
    std::vector<int32_t> new_tokens(r.tokens().begin(), r.tokens().end());
    if (new_tokens.empty()) {
      FinishSeq(s, absl::InternalError("worker committed no token"));
      continue;
    }
    s->worker_step += 1;
    s->steps += 1;
    auto it = trees.find(s->id);
    if (it != trees.end()) {
      s->drafted += static_cast<int32_t>(it->second.num_nodes() - 1);
      s->accepted += r.num_accepted();
      s->last_tree = shapes[s->id];
      const int arm = arms.count(s->id) ? arms[s->id] : -1;
      if (s->bandit.has_value() && arm >= 0) {
        s->bandit->Update(arm, r.num_accepted() + 1);
      }
    }
    s->tel.OnVerify(it != trees.end() ? it->second.num_nodes() : 1, r.num_accepted(),
                    it != trees.end() ? shapes[s->id] : std::string());
    s->tokens.insert(s->tokens.end(), new_tokens.begin(), new_tokens.end());
    s->undrafted.insert(s->undrafted.end(), new_tokens.begin(), new_tokens.end());
    s->last_token = Clock::now();
    Emit(s, new_tokens);
  }
}

void Lane::Emit(Seq* s, const std::vector<int32_t>& new_tokens) {
  const GenerationRequest& g = s->req->request();
  const StopDecision d = ApplyStops(new_tokens, g.stop_token_ids, g.max_tokens - s->counted);
  v1::GenerateResponse chunk;
  FinishReason finish = d.finish;
  int32_t counted = d.num_counted;
  for (int32_t i = 0; i < d.num_emit; ++i) {
    chunk.add_token_ids(new_tokens[i]);
    if (s->detok == nullptr) continue;
    StopStringMatcher::Output o = s->stops->Feed(s->detok->Push(new_tokens[i]));
    chunk.mutable_text()->append(o.text);
    if (o.stopped) {
      finish = FinishReason::kStopString;
      counted = i + 1;
      break;
    }
  }
  s->counted += counted;
  if (finish != FinishReason::kNone && finish != FinishReason::kStopString && s->detok != nullptr) {
    StopStringMatcher::Output o = s->stops->Feed(s->detok->Finish());
    chunk.mutable_text()->append(o.text);
    if (o.stopped) {
      finish = FinishReason::kStopString;
    } else {
      chunk.mutable_text()->append(s->stops->Flush());
    }
  }
  if (chunk.token_ids_size() > 0 || !chunk.text().empty()) s->req->Push(std::move(chunk));
  if (finish == FinishReason::kNone) return;
  v1::GenerateResponse last;
  last.set_finish_reason(ToProto(finish));
  last.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
  last.mutable_usage()->set_completion_tokens(s->counted);
  v1::Timings* t = last.mutable_timings();
  t->set_queue_ns(Ns(s->admitted - s->req->received()));
  t->set_ttft_ns(Ns(s->first_token - s->req->received()));
  t->set_total_ns(Ns(s->last_token - s->req->received()));
  if (s->counted > 1) t->set_per_token_ns(Ns(s->last_token - s->first_token) / (s->counted - 1));
  v1::SpeculationStats* sp = last.mutable_speculation();
  sp->set_drafter(g.drafter);
  sp->set_tree(s->last_tree);
  sp->set_steps(s->steps);
  sp->set_drafted_tokens(s->drafted);
  sp->set_accepted_tokens(s->accepted);
  sp->set_fallback_steps(s->fallback_steps);
  if (s->steps > 0) {
    sp->set_mean_accepted_length(static_cast<double>(s->accepted + s->steps) / s->steps);
  }
  s->req->Push(std::move(last));
  FinishSeq(s, absl::OkStatus());
}

void Lane::FinishSeq(Seq* s, absl::Status status) {
  if (s->done) return;
  s->done = true;
  s->tel.Finish(status);
  s->req->Finish(std::move(status));
  worker_->health.AddLoad(-1);
  if (drafter_ != nullptr) drafter_->health.AddLoad(-1);
}

void Lane::Reap() {
  const Clock::time_point now = Clock::now();
  for (auto& s : live_) {
    if (s->done) continue;
    if (s->req->cancelled()) {
      FinishSeq(s.get(), absl::CancelledError("request cancelled"));
    } else if (s->req->deadline() && now > *s->req->deadline()) {
      FinishSeq(s.get(), absl::DeadlineExceededError("request deadline exceeded"));
    }
  }
  v1::ReleaseRequest wrel;
  v1::ReleaseDraftsRequest drel;
  std::vector<std::unique_ptr<Seq>> keep;
  for (auto& s : live_) {
    if (!s->done) {
      keep.push_back(std::move(s));
      continue;
    }
    wrel.add_sequence_ids(s->id);
    if (s->drafter_open || s->drafter_stale) drel.add_sequence_ids(s->id);
  }
  live_ = std::move(keep);
  if (wrel.sequence_ids_size() > 0 && worker_->health.healthy()) {
    (void)worker_->client->Release(wrel, options_.draft_timeout);
  }
  if (drafter_ != nullptr && drel.sequence_ids_size() > 0 &&
      drafter_->health.MayTry(now)) {
    (void)drafter_->client->Release(drel, options_.draft_timeout);
  }
}

}  // namespace treespec
