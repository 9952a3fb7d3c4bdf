#include "coordinator/step_record.h"

namespace treespec {

const char* FallbackReason(DraftVerdict outcome) {
  switch (outcome) {
    case DraftVerdict::kBudget: return "budget";
    case DraftVerdict::kDrafterUnavailable: return "drafter_unavailable";
    case DraftVerdict::kRpcFailed: return "draft_rpc_failed";
    case DraftVerdict::kSequenceError: return "draft_error";
    case DraftVerdict::kInvalidTree: return "invalid_tree";
    case DraftVerdict::kRootMismatch: return "root_mismatch";
    case DraftVerdict::kNotAsked:
    case DraftVerdict::kDrafted: return "";
  }
  return "";
}

bool IsFallback(DraftVerdict outcome) {
  switch (outcome) {
    case DraftVerdict::kDrafterUnavailable:
    case DraftVerdict::kRpcFailed:
    case DraftVerdict::kSequenceError:
    case DraftVerdict::kInvalidTree:
    case DraftVerdict::kRootMismatch: return true;
    default: return false;
  }
}

bool IsDrafterError(DraftVerdict outcome) {
  return outcome == DraftVerdict::kRpcFailed || outcome == DraftVerdict::kSequenceError ||
         outcome == DraftVerdict::kInvalidTree;
}

void SpecTotals::Add(const StepRecord& r) {
  steps += 1;
  if (r.draft == DraftVerdict::kDrafted) {
    drafted += static_cast<int32_t>(r.nodes - 1);
    accepted += r.accepted;
    last_tree = r.tree;
    predraft_hits += r.predraft_hit;
    predraft_saved_seconds += r.predraft_saved_seconds;
    ahead_steps += r.ahead_asked;
    ahead_hits += r.ahead_hit;
    ahead_saved_seconds += r.ahead_saved_seconds;
  }
  ahead_wait_seconds += r.ahead_wait_seconds;
  if (r.draft != DraftVerdict::kDrafted) plain_steps += 1;
  if (r.planned) {
    planned_steps += 1;
    planned_expected += r.expected_tokens;
    planned_committed += r.committed;
  }
  if (IsFallback(r.draft)) fallback_steps += 1;
  if (IsDrafterError(r.draft) || r.ahead_commit_failed) drafter_errors += 1;
}

}  // namespace treespec
