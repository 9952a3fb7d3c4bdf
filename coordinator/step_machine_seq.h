// StepMachine's per-sequence state, shared by its source files
// (step_machine.cc, step_machine_open.cc, step_machine_ahead.cc). Internal to
// the step machine; thread-compatible like it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/step_machine.h"

namespace treespec {

struct StepMachine::Seq {
  enum class Worker { kOpening, kLive, kFailed };
  enum class Drafter { kNone, kClosed, kOpening, kOpen, kStale };

  std::shared_ptr<RequestState> req;
  uint64_t id = 0;
  Worker worker = Worker::kOpening;
  bool worker_owned = false;  // the worker may hold state under `id`
  std::vector<int32_t> tokens;  // prompt + committed completion (last = pending)
  uint64_t worker_step = 1;
  // Drafter side.
  Drafter drafter = Drafter::kNone;
  bool drafter_owned = false;
  // The Open sent at admission has not returned: the sequence does not step
  // yet, so that its trees (and a seeded sample) never depend on timing.
  // Not set for a greedy auto sequence admitted while no tree pays (Admit).
  bool drafter_first_open = false;
  size_t drafter_consumed = 0;  // tokens the drafter's state has seen
  size_t drafter_open_len = 0;  // prompt length of the Open in flight
  uint64_t drafter_step = 1;
  // A catch-up (PlanCatchUps) is in flight, feeding the drafter up to
  // catch_up_to tokens; the sequence is not drafted until it returns.
  bool catching_up = false;
  size_t catch_up_to = 0;
  int32_t plain_run = 0;  // consecutive steps without a verified tree
  Clock::time_point drafter_retry_at;
  std::optional<UcbBandit> bandit;
  std::optional<SampledShapeBandit> sampled_bandit;  // sampled "auto"
  std::optional<TreeShape> planned;   // "auto": this step's shape from the planner
  std::vector<int32_t> draft_parents;  // the drafted tree's structure
  std::string step_shape;              // the shape this step asked the drafter for
  // Draft-ahead: candidates for drafter step `ahead_step` were asked for
  // beside the last Verify (`ahead`: those the drafter gave); PlanDrafts
  // clears them. This step verifies candidate `candidate` (-1: none) and
  // sends `commit` beside its Verify.
  bool ahead_asked = false;
  uint64_t ahead_step = 0;
  std::string ahead_shape;
  std::vector<AheadCandidateInfo> ahead;
  int32_t candidate = -1;
  DraftItem commit;
  // The step in flight and the totals.
  StepRecord rec;
  SpecTotals totals;
  std::unique_ptr<SeqOutput> out;
  SeqOutput::Times times;
  bool done = false;
  SeqTelemetry tel;
};

// The shape truncated so a step never drafts past the token budget: a step
// emits at most depth + 1 tokens.
std::optional<TreeShape> CapShape(const TreeShape& shape, int64_t remaining);

}  // namespace treespec
