// StepRecord: what happened to one sequence in one speculative step, the single
// record that feeds the request's SpeculationStats (SpecTotals), the lane's
// metrics and the step spans (lane_telemetry.h). The step machine
// (step_machine.h) fills one per live sequence per step: the draft outcome
// when it applies the draft replies, the verified size and accepted count when
// it applies the verify replies.
//
// Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

namespace treespec {

// Why a step verified the tree it did.
enum class DraftVerdict {
  kNotAsked,            // the request decodes plainly (drafter "none" or no shape)
  kBudget,              // the token budget leaves no room for a draft
  kDrafterUnavailable,  // the sequence has no drafter state (opening, failed, reopening)
  kRpcFailed,           // the batched Draft RPC failed
  kSequenceError,       // the drafter answered this sequence with an error
  kInvalidTree,         // the drafter's tree is malformed (vocabulary, size, parents)
  kRootMismatch,        // the tree is not rooted at the sequence's last token
  kDrafted,             // a tree was verified
};

// "", "budget", "drafter_unavailable", "draft_rpc_failed", "draft_error",
// "invalid_tree", "root_mismatch", "" — the fallback reason in metrics/spans.
const char* FallbackReason(DraftVerdict outcome);
// Whether the outcome is a fallback: a drafter was asked for and would have
// been used, but the step ran without a tree.
bool IsFallback(DraftVerdict outcome);
// Whether the outcome is the drafter's fault (counted as a drafter error).
bool IsDrafterError(DraftVerdict outcome);

struct StepRecord {
  uint64_t step = 0;                   // the sequence's worker step (1-based)
  std::string tree;                    // chosen shape; "" when none was chosen
  int arm = -1;                        // bandit arm of `tree`; -1 for a fixed shape
  DraftVerdict draft = DraftVerdict::kNotAsked;
  int64_t nodes = 1;                   // verified tree nodes, root included (1: plain)
  int32_t accepted = 0;                // drafted tokens the target accepted
  int32_t committed = 0;               // tokens committed (accepted + bonus)
  bool planned = false;                // "auto": the planner chose this step's tree (or none)
  double expected_tokens = 0.0;        // planned: predicted tokens of the step (1 + E[accepted])
  bool predraft_hit = false;           // drafted: the tree was pre-drafted (DraftReply)
  double predraft_saved_seconds = 0.0; // drafted hit: estimated drafting time saved
  // Draft-ahead (step_machine.h): candidates for this step had been asked
  // beside the last Verify; one of them was verified (no Draft call for this
  // sequence); the hit's share of the Draft call time the step saved; and
  // this step's share of how long it waited for the candidates it asked for
  // the next step after its Verify had returned.
  bool ahead_asked = false;
  bool ahead_hit = false;
  double ahead_saved_seconds = 0.0;
  double ahead_wait_seconds = 0.0;
  // The draft-ahead call beside this step's Verify failed for this sequence's
  // commit (its drafter state is unknown: a drafter error, not a fallback).
  bool ahead_commit_failed = false;
};

// A request's speculative totals, summed from its StepRecords.
struct SpecTotals {
  int32_t steps = 0;
  int32_t drafted = 0;   // tree nodes below the root, over drafted steps
  int32_t accepted = 0;
  int32_t fallback_steps = 0;
  int32_t drafter_errors = 0;  // ahead commit failures included
  std::string last_tree = "none";  // shape of the last drafted step
  int32_t plain_steps = 0;         // steps verified without a draft tree
  int32_t planned_steps = 0;       // steps whose tree the planner chose
  double planned_expected = 0.0;   // Σ predicted tokens over planned steps
  int32_t planned_committed = 0;   // Σ committed tokens over planned steps
  int32_t predraft_hits = 0;       // drafted steps answered from a pre-drafted tree
  double predraft_saved_seconds = 0.0;
  int32_t ahead_steps = 0;  // drafted steps whose candidates had been asked for
  int32_t ahead_hits = 0;
  double ahead_saved_seconds = 0.0;
  double ahead_wait_seconds = 0.0;

  void Add(const StepRecord& r);
  double mean_accepted_length() const {
    return steps > 0 ? static_cast<double>(accepted + steps) / steps : 0.0;
  }
};

}  // namespace treespec
