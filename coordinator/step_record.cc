#include "coordinator/step_record.h"

namespace treespec {

const char* FallbackReason(DraftOutcome outcome) {
  switch (outcome) {
    case DraftOutcome::kBudget: return "budget";
    case DraftOutcome::kDrafterUnavailable: return "drafter_unavailable";
    case DraftOutcome::kRpcFailed: return "draft_rpc_failed";
    case DraftOutcome::kSequenceError: return "draft_error";
    case DraftOutcome::kInvalidTree: return "invalid_tree";
    case DraftOutcome::kRootMismatch: return "root_mismatch";
    case DraftOutcome::kNotAsked:
    case DraftOutcome::kDrafted: return "";
  }
  return "";
}

bool IsFallback(DraftOutcome outcome) {
  switch (outcome) {
    case DraftOutcome::kDrafterUnavailable:
    case DraftOutcome::kRpcFailed:
    case DraftOutcome::kSequenceError:
    case DraftOutcome::kInvalidTree:
    case DraftOutcome::kRootMismatch: return true;
    default: return false;
  }
}

bool IsDrafterError(DraftOutcome outcome) {
  return outcome == DraftOutcome::kRpcFailed || outcome == DraftOutcome::kSequenceError ||
         outcome == DraftOutcome::kInvalidTree;
}

void SpecTotals::Add(const StepRecord& r) {
  steps += 1;
  if (r.draft == DraftOutcome::kDrafted) {
    drafted += static_cast<int32_t>(r.nodes - 1);
    accepted += r.accepted;
    last_tree = r.tree;
  }
  if (IsFallback(r.draft)) fallback_steps += 1;
  if (IsDrafterError(r.draft)) drafter_errors += 1;
}

}  // namespace treespec
