#include "coordinator/telemetry.h"

namespace treespec {
namespace {

std::vector<double> TokenCountBuckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256}; }

}  // namespace

bool ParseStepTracing(const std::string& s, StepTracing* out) {
  if (s == "spans") {
    *out = StepTracing::kSpans;
  } else if (s == "events") {
    *out = StepTracing::kEvents;
  } else if (s == "off") {
    *out = StepTracing::kOff;
  } else {
    return false;
  }
  return true;
}

CoordinatorTelemetry::CoordinatorTelemetry(MetricsRegistry* r, Tracer* tracer, StepTracing steps)
    : ttft(r->AddHistogram("treespec_request_ttft_seconds",
                           "Time to first token: request received to first token sent",
                           LatencyBuckets(), {"drafter"})),
      tpot(r->AddHistogram("treespec_request_tpot_seconds",
                           "Time per output token after the first, per request", StepBuckets(),
                           {"drafter"})),
      itl(r->AddHistogram("treespec_request_itl_seconds",
                          "Inter-token latency per token (a chunk of k tokens: one gap, k-1 zeros)",
                          StepBuckets(), {"drafter"})),
      e2e(r->AddHistogram("treespec_request_e2e_seconds",
                          "End-to-end latency: request received to stream end", LatencyBuckets(),
                          {"drafter"})),
      queue(r->AddHistogram("treespec_request_queue_seconds",
                            "Time from request received to admission into a lane",
                            LatencyBuckets(), {"drafter"})),
      requests(r->AddCounter("treespec_requests_total",
                             "Generate requests by final gRPC status code", {"code"})),
      finished(r->AddCounter("treespec_requests_finished_total",
                             "Successful Generate requests by finish reason", {"reason"})),
      prompt_tokens(r->AddCounter("treespec_prompt_tokens_total", "Prompt tokens of admitted requests",
                                  {"drafter"})),
      completion_tokens(r->AddCounter("treespec_completion_tokens_total",
                                      "Completion tokens sent", {"drafter"})),
      drafts(r->AddCounter("treespec_spec_drafts_total",
                           "Sequence-steps verified with a drafted tree", {"drafter", "tree"})),
      draft_tokens(r->AddCounter("treespec_spec_draft_tokens_total",
                                 "Drafted tokens sent to verification (tree nodes minus the root)",
                                 {"drafter", "tree"})),
      accepted_tokens(r->AddCounter("treespec_spec_accepted_tokens_total",
                                    "Drafted tokens the target accepted", {"drafter", "tree"})),
      accepted_by_depth(r->AddCounter(
          "treespec_spec_accepted_by_depth_total",
          "Sequence-steps whose accepted path reached depth d (divide by drafts for the "
          "acceptance rate at position d)",
          {"drafter", "tree", "depth"}, 1024)),
      fallback_steps(r->AddCounter("treespec_spec_fallback_steps_total",
                                   "Steps verified without a tree although a drafter was asked for",
                                   {"drafter", "reason"})),
      drafter_errors(r->AddCounter("treespec_drafter_errors_total",
                                   "Steps whose draft the drafter got wrong (failed RPC, an error "
                                   "for the sequence, a malformed tree)",
                                   {"drafter", "reason"})),
      planned_steps(r->AddCounter("treespec_spec_planned_steps_total",
                                  "Sequence-steps whose tree the tree=auto planner chose; "
                                  "speculated=false: it chose none (a plain step)",
                                  {"drafter", "speculated"})),
      planned_tree_nodes(r->AddHistogram("treespec_spec_planned_tree_nodes",
                                         "Draft nodes verified per planned sequence-step (0: none)",
                                         TokenCountBuckets(), {"drafter"})),
      planned_expected_tokens(r->AddHistogram(
          "treespec_spec_planned_expected_tokens",
          "Tokens per planned sequence-step the planner predicted (1 + expected accepted)",
          TokenCountBuckets(), {"drafter"})),
      planned_committed_tokens(r->AddHistogram(
          "treespec_spec_planned_committed_tokens",
          "Tokens per planned sequence-step committed (compare with the expected histogram)",
          TokenCountBuckets(), {"drafter"})),
      predraft_steps(r->AddCounter("treespec_spec_predraft_steps_total",
                                   "Drafted sequence-steps whose tree the drafter had pre-drafted "
                                   "during the previous verify (hit) or not (miss)",
                                   {"drafter", "outcome"})),
      predraft_saved_seconds(r->AddHistogram(
          "treespec_spec_predraft_saved_seconds",
          "Per pre-draft hit, the estimated drafting time saved (the lane's draft cost model's "
          "time for the tree alone minus the drafter's answer time)",
          StepBuckets(), {"drafter"})),
      draft_ahead_steps(r->AddCounter(
          "treespec_spec_draft_ahead_steps_total",
          "Drafted sequence-steps whose candidate trees were asked for beside the previous "
          "Verify: verified from a candidate without a Draft call (hit) or drafted (miss)",
          {"drafter", "outcome"})),
      draft_ahead_saved_seconds(r->AddHistogram(
          "treespec_spec_draft_ahead_saved_seconds",
          "Per draft-ahead hit, its share of the Draft call time its step saved (the lane's "
          "draft cost model, plus the Draft round trip when the step made no Draft call)",
          StepBuckets(), {"drafter"})),
      draft_ahead_wait_seconds(r->AddHistogram(
          "treespec_spec_draft_ahead_wait_seconds",
          "Per step that asked for draft-ahead candidates, how long it waited for them after "
          "its Verify returned",
          StepBuckets(), {"drafter"})),
      lane_rpc_seconds(r->AddHistogram("treespec_lane_rpc_seconds",
                                       "Batched RPC time seen by a lane (prefill, drafter_open, "
                                       "draft, verify)",
                                       StepBuckets(), {"rpc"})),
      lane_batch_size(r->AddHistogram("treespec_lane_batch_size",
                                      "Sequences per batched RPC of a lane", TokenCountBuckets(),
                                      {"rpc"})),
      registry_(r),
      tracer_(tracer),
      steps_(steps) {
  for (const char* rpc : {"prefill", "drafter_open", "draft", "verify", "draft_ahead"}) {
    rpc_metrics_[rpc] = {lane_rpc_seconds->WithLabels({rpc}), lane_batch_size->WithLabels({rpc})};
  }
}

const CoordinatorTelemetry::RpcMetrics& CoordinatorTelemetry::ForRpc(const std::string& rpc) const {
  static const RpcMetrics kNone;
  auto it = rpc_metrics_.find(rpc);
  return it == rpc_metrics_.end() ? kNone : it->second;
}

void CoordinatorTelemetry::RegisterGauges(const GaugeSource* c) {
  registry_->AddGaugeCallback("treespec_queue_depth",
                              "Requests waiting for admission into a lane",
                              [c] { return static_cast<double>(c->NumWaiting()); });
  registry_->AddGaugeCallback("treespec_live_sequences", "Sequences being decoded",
                              [c] { return static_cast<double>(c->NumLive()); });
  auto samples = [](const std::vector<GaugeSource::Health>& hs) {
    std::vector<GaugeSample> out;
    for (const auto& h : hs) out.push_back({{h.name}, h.healthy ? 1.0 : 0.0});
    return out;
  };
  registry_->AddGaugeCallback(
      "treespec_worker_up", "Whether the coordinator considers a worker group healthy (1) or not",
      {"worker"}, [c, samples] { return samples(c->WorkerHealth()); });
  registry_->AddGaugeCallback("treespec_drafter_up",
                              "Whether a drafter name has a healthy replica (1) or not",
                              {"drafter"}, [c, samples] { return samples(c->DrafterHealth()); });
}

}  // namespace treespec
