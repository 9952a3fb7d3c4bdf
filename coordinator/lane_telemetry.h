// The lane's share of coordinator telemetry (telemetry.h): per-sequence
// speculative counters and step spans, and the trace context of each batched
// internal RPC.
//
// A batched RPC serves many requests but carries one `traceparent`: the span
// of the first sampled sequence in the batch (its `draft` / `verify` /
// `prefill` span); the other sampled sequences' spans travel in
// `treespec-trace-links` (at most 16) and become links of the server's span.
// A batch with no sampled sequence still propagates an unsampled parent, so
// the worker and drafter do not start traces of their own for it.
//
// Cost when off: a null check per call. When on: metric children are looked
// up when a sequence's tree shape changes, not per step; per-step spans cost
// one SpanData per sampled sequence per RPC (tools/bench/trace_bench.cc
// measures it against step events).
//
// Thread-compatible: a sequence's telemetry is used by its lane thread only;
// the Open RPCs, which run on the lane's task pool, trace through copies.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/request.h"
#include "coordinator/telemetry.h"
#include "obs/span.h"
#include "obs/trace_context.h"

namespace treespec {

class SeqTelemetry {
 public:
  using Clock = std::chrono::steady_clock;

  // At admission: records the `queue` span and queue time.
  void Admit(CoordinatorTelemetry* t, const RequestState& req, Clock::time_point admitted);
  // This step's draft request returned a tree of `nodes` nodes (root included).
  void OnDraft(const std::string& tree, int64_t nodes);
  // This step's tree was (`hit`) or was not pre-drafted; `saved_seconds`:
  // the estimated drafting time a hit saved.
  void OnPredraft(bool hit, double saved_seconds);
  // This step's candidates had been asked for (draft-ahead): `hit` it
  // verified one, saving an estimated `saved_seconds`.
  void OnDraftAhead(bool hit, double saved_seconds);
  // The step waited `seconds` for the candidates it asked for (once per step).
  void OnDraftAheadWait(double seconds);
  // This step is verified root-only although the request asked for a drafter.
  // Without `reason`, it is inferred from the draft RPC and OnDraft calls.
  void OnFallback();
  void OnFallback(const char* reason);
  // The drafter got this step's draft wrong (`reason` as in FallbackReason).
  void OnDrafterError(const char* reason);
  // This step's verification: `nodes` tree nodes (1: a plain step), `accepted`
  // drafted tokens accepted; `tree` is the drafted shape ("" for none).
  void OnVerify(int64_t nodes, int32_t accepted, const std::string& tree);
  // A step planned by tree=auto: `draft_nodes` verified (0: plain), the
  // predicted tokens and those committed.
  void OnPlanned(int64_t draft_nodes, double expected_tokens, int32_t committed);
  // The sequence ended (events mode: records its `decode` span).
  void Finish(const absl::Status& status);

 private:
  friend class BatchRpcTrace;
  enum class DraftState { kNone, kRpcFailed, kError, kOk };

  bool traced() const { return t_ != nullptr && parent_.sampled() && t_->tracer() != nullptr; }
  void CacheCounters(const std::string& tree);

  CoordinatorTelemetry* t_ = nullptr;
  std::string drafter_;  // resolved name; "none" for plain decoding
  SpanContext parent_;   // the request's `generate` span
  SpanContext decode_;   // events mode
  int64_t decode_start_ns_ = 0;
  std::vector<SpanEvent> events_;
  // The span of the RPC in flight (spans mode) and its attributes.
  SpanContext pending_;
  std::vector<Attribute> pending_attributes_;
  DraftState draft_state_ = DraftState::kNone;
  const char* fallback_reason_ = nullptr;
  uint64_t step_ = 0;
  // Counters of the last tree shape.
  std::string cached_tree_;
  Counter* drafts_ = nullptr;
  Counter* draft_tokens_ = nullptr;
  Counter* accepted_ = nullptr;
  std::vector<Counter*> by_depth_;
  Counter* fallbacks_[4] = {nullptr, nullptr, nullptr, nullptr};  // by DraftState
};

// One batched internal RPC of a lane: installs the outgoing trace context for
// the call, times it, and at destruction records each sampled sequence's
// span (with the attributes OnDraft / OnVerify added in between).
class BatchRpcTrace {
 public:
  // `rpc`: "prefill", "drafter_open", "draft", "verify" or "draft_ahead". `seqs`: a range of
  // pointers (raw or smart) to objects with a `tel` member (SeqTelemetry).
  template <typename Range>
  BatchRpcTrace(CoordinatorTelemetry* t, const char* rpc, const Range& seqs) : t_(t), rpc_(rpc) {
    if (t == nullptr) return;
    for (const auto& s : seqs) members_.push_back(&s->tel);
    Begin();
  }
  // The same for the sequences' telemetry itself.
  BatchRpcTrace(CoordinatorTelemetry* t, const char* rpc, std::vector<SeqTelemetry*> members)
      : t_(t), rpc_(rpc) {
    if (t == nullptr) return;
    members_ = std::move(members);
    Begin();
  }
  ~BatchRpcTrace();
  BatchRpcTrace(const BatchRpcTrace&) = delete;
  BatchRpcTrace& operator=(const BatchRpcTrace&) = delete;

  // The RPC returned with `status`; removes the outgoing context.
  void End(const absl::Status& status);

 private:
  void Begin();

  CoordinatorTelemetry* const t_;
  const std::string rpc_;
  std::vector<SeqTelemetry*> members_;
  std::optional<OutgoingTraceScope> scope_;
  std::chrono::steady_clock::time_point t0_, t1_;
  int64_t t0_unix_ns_ = 0;
  absl::Status status_;
  bool ended_ = false;
};

}  // namespace treespec
