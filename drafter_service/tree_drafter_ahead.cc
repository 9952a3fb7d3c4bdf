// Draft-ahead (DraftRequest.ahead): TreeDrafter's answer, and the default
// answer of drafters that do not draft ahead. The design is in
// tree_drafter.h; the outcomes' ranking in predraft_outcomes.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "drafter_service/tree_drafter.h"

namespace treespec {

std::vector<AheadOutcome> Drafter::DraftAhead(const std::vector<DraftSpec>& specs,
                                              const std::vector<AheadSpec>& ahead,
                                              std::vector<DraftOutcome>* drafted) {
  *drafted = specs.empty() ? std::vector<DraftOutcome>{} : Draft(specs);
  std::vector<AheadOutcome> out(ahead.size());
  for (size_t i = 0; i < ahead.size(); ++i) {
    out[i].id = ahead[i].id;
    out[i].step = ahead[i].step;
    out[i].status = absl::UnimplementedError(
        absl::StrCat("drafter kind '", kind(), "' does not draft ahead"));
  }
  return out;
}

std::vector<AheadOutcome> TreeDrafter::DraftAhead(const std::vector<DraftSpec>& specs,
                                                  const std::vector<AheadSpec>& ahead,
                                                  std::vector<DraftOutcome>* drafted) {
  const absl::Time t0 = absl::Now();
  ForegroundLock lock(this);
  *drafted = DraftLocked(specs, t0);
  std::vector<AheadOutcome> out(ahead.size());
  std::vector<Guess> guesses;
  BatchIds ids;
  for (size_t i = 0; i < ahead.size(); ++i) {
    out[i].id = ahead[i].id;
    out[i].step = ahead[i].step;
    out[i].status = ids.Add(ahead[i].id);
    if (out[i].status.ok()) out[i].status = PlanAhead(ahead[i], &guesses);
  }
  // All ranks of all items as one batch: the coordinator waits for the
  // whole answer anyway, and one batched level costs less than several.
  PrepareGuesses(&guesses, /*preemptible=*/false);
  for (size_t i = 0; i < ahead.size(); ++i) {
    if (out[i].status.ok()) CollectAhead(ahead[i], &out[i]);
  }
  // What the background would pre-draft for these sequences is done.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const PredraftSeed& p) {
                                  return std::any_of(ahead.begin(), ahead.end(),
                                                     [&](const AheadSpec& a) { return a.id == p.id; });
                                }),
                 pending_.end());
  return out;
}

namespace {

// The DraftSpec an ahead item's candidates answer, before its outcome.
DraftSpec SpecOf(const AheadSpec& a) {
  DraftSpec s;
  s.id = a.id;
  s.step = a.step - 1;  // GuessOf advances it to the asked step
  s.shape = a.shape;
  s.temperature = a.temperature;
  s.top_k = a.top_k;
  s.seed = a.seed;
  return s;
}

}  // namespace

absl::Status TreeDrafter::PlanAhead(const AheadSpec& a, std::vector<Guess>* guesses) {
  if (max_ahead_candidates() <= 0) {
    return absl::UnimplementedError(
        "this drafter does not draft ahead (--predraft 0 or --draft_ahead=false)");
  }
  if (a.max_candidates < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ahead max_candidates ", a.max_candidates, " must be >= 1"));
  }
  TS_ASSIGN_OR_RETURN(SeqState * state, seqs_.Find(a.id));
  if (state->broken) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", a.id, " lost its drafter state in an earlier failure; release and reopen it"));
  }
  TS_RETURN_IF_ERROR(seqs_.CheckStep(a.id, a.step, "ahead step", "drafted"));
  if (state->last_tree.num_nodes() < 1 || state->last_node_logits.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", a.id, " has no drafted tree to draft ahead of"));
  }
  const DraftSpec base = SpecOf(a);
  DraftSpec check = base;
  check.new_tokens = {0};
  TS_RETURN_IF_ERROR(ValidateDraftSpec(check, options_.max_tree_nodes, vocab_size()));
  const std::vector<PredictedOutcome>& outcomes = Outcomes(base, state);
  const size_t n = std::min<size_t>(outcomes.size(), a.max_candidates);
  std::vector<Guess> mine;
  for (size_t r = 0; r < n; ++r) mine.push_back(GuessOf(base, state->last_tree, outcomes[r]));
  // Prepared trees of other guesses (another shape, an older ranking) give
  // their forked state back before new forks are taken.
  const auto wanted = [&](const Prepared& p) {
    return std::any_of(mine.begin(), mine.end(),
                       [&](const Guess& g) { return SameRequest(p.spec, g.spec); });
  };
  std::vector<Prepared> keep;
  for (Prepared& p : state->prepared) {
    if (wanted(p)) {
      keep.push_back(std::move(p));
    } else {
      ReleaseSequence(p.fork_id);
    }
  }
  state->prepared = std::move(keep);
  for (Guess& g : mine) {
    const bool prepared = std::any_of(state->prepared.begin(), state->prepared.end(),
                                      [&](const Prepared& p) { return SameRequest(p.spec, g.spec); });
    if (!prepared) guesses->push_back(std::move(g));
  }
  return absl::OkStatus();
}

void TreeDrafter::CollectAhead(const AheadSpec& a, AheadOutcome* out) {
  SeqState* state = seqs_.FindAny(a.id);
  if (state == nullptr) return;
  const DraftSpec base = SpecOf(a);
  const std::vector<PredictedOutcome>& outcomes = Outcomes(base, state);
  const size_t n = std::min<size_t>(outcomes.size(), a.max_candidates);
  for (size_t r = 0; r < n; ++r) {
    const Guess g = GuessOf(base, state->last_tree, outcomes[r]);
    for (const Prepared& p : state->prepared) {
      if (!SameRequest(p.spec, g.spec)) continue;
      out->candidates.push_back({g.spec.new_tokens, p.tree});
      break;
    }
  }
}

}  // namespace treespec
