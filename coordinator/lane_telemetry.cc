#include "coordinator/lane_telemetry.h"

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

constexpr size_t kMaxEventsPerSpan = 512;

int64_t Nanos(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

std::string StatusName(const absl::Status& st) { return absl::StatusCodeToString(st.code()); }

}  // namespace

// ---------------------------------------------------------------- SeqTelemetry

void SeqTelemetry::Admit(CoordinatorTelemetry* t, const RequestState& req,
                         Clock::time_point admitted) {
  if (t == nullptr) return;
  t_ = t;
  drafter_ = req.request().drafter;
  parent_ = req.trace();
  t->queue->WithLabels({drafter_})->Observe(
      std::chrono::duration<double>(admitted - req.received()).count());
  if (!traced()) return;
  SpanData q;
  q.context = t->tracer()->NewContext(parent_);
  q.parent_span_id = parent_.span_id;
  q.name = "queue";
  q.start_unix_ns = UnixNanos(req.received());
  q.end_unix_ns = q.start_unix_ns + Nanos(admitted - req.received());
  t->tracer()->Record(std::move(q));
  if (t->steps() == StepTracing::kEvents) {
    decode_ = t->tracer()->NewContext(parent_);
    decode_start_ns_ = UnixNanos(admitted);
  }
}

void SeqTelemetry::CacheCounters(const std::string& tree) {
  if (tree == cached_tree_ && drafts_ != nullptr) return;
  cached_tree_ = tree;
  drafts_ = t_->drafts->WithLabels({drafter_, tree});
  draft_tokens_ = t_->draft_tokens->WithLabels({drafter_, tree});
  accepted_ = t_->accepted_tokens->WithLabels({drafter_, tree});
  by_depth_.clear();
}

void SeqTelemetry::OnDraft(const std::string& tree, int64_t nodes) {
  if (t_ == nullptr) return;
  draft_state_ = DraftState::kOk;
  if (!traced()) return;
  if (t_->steps() == StepTracing::kSpans) {
    pending_attributes_.push_back({"treespec.tree", tree});
    pending_attributes_.push_back({"treespec.tree.size", nodes});
  } else if (t_->steps() == StepTracing::kEvents && events_.size() < kMaxEventsPerSpan) {
    events_.push_back({NowUnixNanos(), "draft",
                       {{"treespec.step", static_cast<int64_t>(step_ + 1)},
                        {"treespec.tree", tree},
                        {"treespec.tree.size", nodes}}});
  }
}

void SeqTelemetry::OnPredraft(bool hit, double saved_seconds) {
  if (t_ == nullptr) return;
  t_->predraft_steps->WithLabels({drafter_, hit ? "hit" : "miss"})->Inc();
  if (hit) t_->predraft_saved_seconds->WithLabels({drafter_})->Observe(saved_seconds);
}

void SeqTelemetry::OnDraftAhead(bool hit, double saved_seconds) {
  if (t_ == nullptr) return;
  t_->draft_ahead_steps->WithLabels({drafter_, hit ? "hit" : "miss"})->Inc();
  if (hit) t_->draft_ahead_saved_seconds->WithLabels({drafter_})->Observe(saved_seconds);
}

void SeqTelemetry::OnDraftAheadWait(double seconds) {
  if (t_ == nullptr) return;
  t_->draft_ahead_wait_seconds->WithLabels({drafter_})->Observe(seconds);
}

void SeqTelemetry::OnFallback() {
  if (t_ == nullptr) return;
  switch (draft_state_) {
    case DraftState::kNone: fallback_reason_ = "drafter_unavailable"; break;
    case DraftState::kRpcFailed: fallback_reason_ = "draft_rpc_failed"; break;
    case DraftState::kError: fallback_reason_ = "draft_error"; break;
    case DraftState::kOk: fallback_reason_ = "root_mismatch"; break;
  }
  Counter*& c = fallbacks_[static_cast<int>(draft_state_)];
  if (c == nullptr) c = t_->fallback_steps->WithLabels({drafter_, fallback_reason_});
  c->Inc();
}

void SeqTelemetry::OnFallback(const char* reason) {
  if (t_ == nullptr) return;
  fallback_reason_ = reason;
  t_->fallback_steps->WithLabels({drafter_, reason})->Inc();
}

void SeqTelemetry::OnDrafterError(const char* reason) {
  if (t_ == nullptr) return;
  t_->drafter_errors->WithLabels({drafter_, reason})->Inc();
}

void SeqTelemetry::OnPlanned(int64_t draft_nodes, double expected_tokens, int32_t committed) {
  if (t_ == nullptr) return;
  t_->planned_steps->WithLabels({drafter_, draft_nodes > 0 ? "true" : "false"})->Inc();
  t_->planned_tree_nodes->WithLabels({drafter_})->Observe(static_cast<double>(draft_nodes));
  t_->planned_expected_tokens->WithLabels({drafter_})->Observe(expected_tokens);
  t_->planned_committed_tokens->WithLabels({drafter_})->Observe(committed);
}

void SeqTelemetry::OnVerify(int64_t nodes, int32_t accepted, const std::string& tree) {
  if (t_ == nullptr) return;
  step_ += 1;
  if (nodes > 1 && drafter_ != "none") {
    CacheCounters(tree);
    drafts_->Inc();
    draft_tokens_->Inc(static_cast<uint64_t>(nodes - 1));
    accepted_->Inc(static_cast<uint64_t>(std::max(accepted, 0)));
    for (int32_t d = 0; d < accepted; ++d) {
      if (d >= static_cast<int32_t>(by_depth_.size())) {
        by_depth_.push_back(t_->accepted_by_depth->WithLabels(
            {drafter_, tree, absl::StrCat(by_depth_.size() + 1)}));
      }
      by_depth_[d]->Inc();
    }
  }
  if (traced()) {
    std::vector<Attribute> attrs = {{"treespec.step", static_cast<int64_t>(step_)},
                                    {"treespec.tree.size", nodes},
                                    {"treespec.accepted", static_cast<int64_t>(accepted)}};
    if (fallback_reason_ != nullptr) {
      attrs.push_back({"treespec.fallback_reason", std::string(fallback_reason_)});
    }
    if (t_->steps() == StepTracing::kSpans) {
      for (Attribute& a : attrs) pending_attributes_.push_back(std::move(a));
    } else if (t_->steps() == StepTracing::kEvents && events_.size() < kMaxEventsPerSpan) {
      events_.push_back({NowUnixNanos(), "verify", std::move(attrs)});
    }
  }
  draft_state_ = DraftState::kNone;
  fallback_reason_ = nullptr;
}

void SeqTelemetry::Finish(const absl::Status& status) {
  if (!traced() || t_->steps() != StepTracing::kEvents || !decode_.valid()) return;
  SpanData d;
  d.context = decode_;
  d.parent_span_id = parent_.span_id;
  d.name = "decode";
  d.start_unix_ns = decode_start_ns_;
  d.end_unix_ns = NowUnixNanos();
  d.events = std::move(events_);
  d.Add("treespec.steps", static_cast<int64_t>(step_));
  if (!status.ok()) {
    d.status = SpanStatus::kError;
    d.status_message = StatusName(status);
  }
  t_->tracer()->Record(std::move(d));
  decode_ = SpanContext{};
}

// ---------------------------------------------------------------- BatchRpcTrace

void BatchRpcTrace::Begin() {
  t0_ = std::chrono::steady_clock::now();
  t0_unix_ns_ = UnixNanos(t0_);
  const bool step_rpc = rpc_ == "draft" || rpc_ == "verify";
  OutgoingTrace out;
  SpanContext unsampled;
  for (SeqTelemetry* m : members_) {
    m->pending_ = SpanContext{};
    m->pending_attributes_.clear();
    if (!m->parent_.valid()) continue;
    if (!m->traced()) {
      if (!unsampled.valid()) unsampled = m->parent_;
      continue;
    }
    SpanContext carrier;
    if (step_rpc && t_->steps() == StepTracing::kEvents) {
      carrier = m->decode_;
    } else if (step_rpc && t_->steps() == StepTracing::kOff) {
      carrier = m->parent_;
    } else {
      m->pending_ = t_->tracer()->NewContext(m->parent_);
      carrier = m->pending_;
    }
    if (!out.parent.valid()) {
      out.parent = carrier;
    } else if (out.links.size() < static_cast<size_t>(kMaxTraceLinks)) {
      out.links.push_back(carrier);
    }
  }
  if (!out.parent.valid()) out.parent = unsampled;
  if (out.parent.valid()) scope_.emplace(std::move(out));
}

void BatchRpcTrace::End(const absl::Status& status) {
  if (t_ == nullptr || ended_) return;
  ended_ = true;
  t1_ = std::chrono::steady_clock::now();
  status_ = status;
  scope_.reset();
  const CoordinatorTelemetry::RpcMetrics& m = t_->ForRpc(rpc_);
  if (m.seconds != nullptr) m.seconds->Observe(std::chrono::duration<double>(t1_ - t0_).count());
  if (m.batch_size != nullptr) m.batch_size->Observe(static_cast<double>(members_.size()));
  if (rpc_ == "draft") {
    for (SeqTelemetry* m : members_) {
      m->draft_state_ = status.ok() ? SeqTelemetry::DraftState::kError
                                    : SeqTelemetry::DraftState::kRpcFailed;
    }
  }
}

BatchRpcTrace::~BatchRpcTrace() {
  if (t_ == nullptr) return;
  if (!ended_) End(absl::CancelledError("not completed"));
  const int64_t end_ns = t0_unix_ns_ + Nanos(t1_ - t0_);
  for (SeqTelemetry* m : members_) {
    if (!m->pending_.valid()) continue;
    SpanData s;
    s.context = m->pending_;
    s.parent_span_id = m->parent_.span_id;
    s.name = rpc_;
    s.kind = SpanKind::kClient;
    s.start_unix_ns = t0_unix_ns_;
    s.end_unix_ns = end_ns;
    s.attributes = std::move(m->pending_attributes_);
    s.Add("treespec.batch_size", static_cast<int64_t>(members_.size()));
    if (!status_.ok()) {
      s.status = SpanStatus::kError;
      s.status_message = StatusName(status_);
    }
    t_->tracer()->Record(std::move(s));
    m->pending_ = SpanContext{};
    m->pending_attributes_.clear();
  }
}

}  // namespace treespec
