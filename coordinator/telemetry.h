// CoordinatorTelemetry: the coordinator's Prometheus metrics and its tracer.
//
// Metrics (names as exported; seconds unless noted):
//   treespec_request_ttft_seconds{drafter}          time to first token
//   treespec_request_tpot_seconds{drafter}          time per output token after the first
//   treespec_request_itl_seconds{drafter}           inter-token latency, per token (see below)
//   treespec_request_e2e_seconds{drafter}           request received → stream end
//   treespec_request_queue_seconds{drafter}         received → admitted into a lane
//   treespec_requests_total{code}                   every request by final status code
//   treespec_requests_finished_total{reason}        successful requests by finish reason
//   treespec_prompt_tokens_total / treespec_completion_tokens_total {drafter}
//   treespec_queue_depth, treespec_live_sequences   gauges (read at scrape time)
//   treespec_spec_drafts_total{drafter,tree}        sequence-steps verified with a drafted tree
//   treespec_spec_draft_tokens_total{drafter,tree}  drafted tokens (tree nodes minus root)
//   treespec_spec_accepted_tokens_total{drafter,tree}
//   treespec_spec_accepted_by_depth_total{drafter,tree,depth}
//                                                   steps whose accepted path reached depth d;
//                                                   ÷ drafts = acceptance rate at position d
//   treespec_spec_fallback_steps_total{drafter,reason}
//                                                   steps verified without a tree although the
//                                                   request asked for a drafter
//   treespec_drafter_errors_total{drafter,reason}  steps whose draft the drafter got wrong
//                                                   (draft_rpc_failed, draft_error, invalid_tree);
//                                                   each is also a fallback step
//   treespec_lane_rpc_seconds{rpc}                  batched prefill / drafter_open / draft /
//                                                   verify RPC time seen by the lane
//   treespec_lane_batch_size{rpc}                   sequences per batched RPC (count)
//
// Inter-token latency is per token, not per chunk: a chunk of k tokens that
// arrives t after the previous token counts one gap of t and k−1 gaps of 0
// (the tokens of one chunk reach the client together). The load generator
// uses the same convention.
//
// Traces: each request gets a `generate` SERVER span (child of the client's
// traceparent, else a new root), a `queue` span, a `prefill` span, and per
// step `draft` and `verify` CLIENT spans — or, with StepTracing::kEvents, one
// `decode` span per sequence carrying a `draft` and a `verify` event per step.
// The worker's and drafter's server spans are children of these through the
// traceparent the lane injects (lane_telemetry.h).
//
// Families are created once; children are looked up per request or per step
// (never per token) and updated with atomics. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "obs/metrics.h"
#include "obs/tracer.h"

namespace treespec {

// What the gauges read at scrape time; the coordinator implements it (so this
// header does not depend on coordinator.h, which depends on it). Thread-safe.
class GaugeSource {
 public:
  struct Health {
    std::string name;
    bool healthy = false;
  };
  virtual ~GaugeSource() = default;
  virtual int64_t NumWaiting() const = 0;
  virtual int64_t NumLive() const = 0;
  virtual std::vector<Health> WorkerHealth() const = 0;
  // One entry per drafter name: healthy if any replica is.
  virtual std::vector<Health> DrafterHealth() const = 0;
};

enum class StepTracing { kSpans, kEvents, kOff };
// "spans" | "events" | "off".
bool ParseStepTracing(const std::string& s, StepTracing* out);

class CoordinatorTelemetry {
 public:
  // `registry` (required) and `tracer` (null: no traces) must outlive this.
  CoordinatorTelemetry(MetricsRegistry* registry, Tracer* tracer,
                       StepTracing steps = StepTracing::kSpans);

  // Gauges read from `source` (the coordinator) at scrape time: queue depth,
  // live sequences, endpoint health. It must outlive the registry's use.
  void RegisterGauges(const GaugeSource* source);

  // The lane_rpc_seconds and lane_batch_size children of a batched RPC kind
  // ("prefill", "drafter_open", "draft", "verify"), looked up once.
  struct RpcMetrics {
    Histogram* seconds = nullptr;
    Histogram* batch_size = nullptr;
  };
  const RpcMetrics& ForRpc(const std::string& rpc) const;

  Tracer* tracer() const { return tracer_; }
  StepTracing steps() const { return steps_; }
  MetricsRegistry* registry() const { return registry_; }

  HistogramFamily* const ttft;
  HistogramFamily* const tpot;
  HistogramFamily* const itl;
  HistogramFamily* const e2e;
  HistogramFamily* const queue;
  CounterFamily* const requests;
  CounterFamily* const finished;
  CounterFamily* const prompt_tokens;
  CounterFamily* const completion_tokens;
  CounterFamily* const drafts;
  CounterFamily* const draft_tokens;
  CounterFamily* const accepted_tokens;
  CounterFamily* const accepted_by_depth;
  CounterFamily* const fallback_steps;
  CounterFamily* const drafter_errors;
  // tree=auto, per drafter: the steps the planner chose (speculated "true" or
  // "false": the share without speculation), the draft nodes it verified (0:
  // none), and the tokens it predicted per step against those committed.
  CounterFamily* const planned_steps;
  HistogramFamily* const planned_tree_nodes;
  HistogramFamily* const planned_expected_tokens;
  HistogramFamily* const planned_committed_tokens;
  // Pre-drafting, per drafter: drafted sequence-steps whose tree the drafter
  // had ready (outcome "hit") or not ("miss"), and per hit the estimated
  // drafting time saved (its _sum is the total).
  CounterFamily* const predraft_steps;
  HistogramFamily* const predraft_saved_seconds;
  // Draft-ahead, per drafter (SpeculationStats.draft_ahead_* defines them):
  // drafted sequence-steps whose candidates had been asked for, verified
  // from a candidate without a Draft call ("hit") or drafted normally
  // ("miss"); per hit its share of the Draft call time the step saved; per
  // step that asked, how long it waited for the candidates after its Verify.
  CounterFamily* const draft_ahead_steps;
  HistogramFamily* const draft_ahead_saved_seconds;
  HistogramFamily* const draft_ahead_wait_seconds;
  HistogramFamily* const lane_rpc_seconds;
  HistogramFamily* const lane_batch_size;

 private:
  MetricsRegistry* const registry_;
  Tracer* const tracer_;
  const StepTracing steps_;
  std::map<std::string, RpcMetrics> rpc_metrics_;  // immutable after construction
};

}  // namespace treespec
