// TreeDrafter's pre-drafting: the background thread and the bookkeeping of
// prepared trees (the design is in tree_drafter.h, the ranking of outcomes in
// predraft_outcomes.h).
#include "drafter_service/tree_drafter.h"

namespace treespec {

TreeDrafter::TreeDrafter(const DrafterOptions& options)
    : options_(options),
      seqs_(SequenceTableOptions{options.max_sequences, options.sequence_lease}) {
  if (options_.predraft > 0) thread_ = std::thread([this] { PredraftLoop(); });
}

TreeDrafter::~TreeDrafter() { StopPredraft(); }

void TreeDrafter::StopPredraft() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TreeDrafter::WaitIdle() {
  mu_.LockWhen(absl::Condition(this, &TreeDrafter::PredraftIdle));
  mu_.Unlock();
}

bool TreeDrafter::PredraftReady() const {
  return stop_ || (!pending_.empty() && num_foreground_.load() == 0);
}

bool TreeDrafter::PredraftIdle() const { return stop_ || (pending_.empty() && !predraft_busy_); }

void TreeDrafter::DropPrepared(SeqState* state) {
  for (const Prepared& p : state->prepared) ReleaseSequence(p.fork_id);
  state->prepared.clear();
}

void TreeDrafter::PredraftLoop() {
  while (true) {
    mu_.LockWhen(absl::Condition(this, &TreeDrafter::PredraftReady));
    if (stop_) {
      mu_.Unlock();
      return;
    }
    predraft_busy_ = true;
    RunPredraftRound();
    predraft_busy_ = false;
    mu_.Unlock();
  }
}

const std::vector<PredictedOutcome>& TreeDrafter::Outcomes(const DraftSpec& spec, SeqState* state) {
  if (!state->has_outcomes) {
    state->outcomes = PredictOutcomes(state->last_tree, state->last_node_logits, spec.temperature,
                                      options_.predraft);
    state->has_outcomes = true;
  }
  return state->outcomes;
}

TreeDrafter::Guess TreeDrafter::GuessOf(const DraftSpec& spec, const TokenTree& tree,
                                        const PredictedOutcome& oc) {
  Guess g{spec, oc.path};
  ++g.spec.step;
  g.spec.new_tokens.clear();
  for (size_t k = 1; k < oc.path.size(); ++k) g.spec.new_tokens.push_back(tree.tokens[oc.path[k]]);
  g.spec.new_tokens.push_back(oc.bonus);
  g.spec.features.clear();
  g.spec.catch_up = false;
  return g;
}

bool TreeDrafter::PrepareGuesses(std::vector<Guess>* guesses, bool preemptible) {
  std::vector<Build> builds;
  std::vector<const Guess*> built;
  std::vector<std::vector<int32_t>> bonus;  // each fork's one new token
  bonus.reserve(guesses->size());
  const TokenTree empty;
  for (const Guess& g : *guesses) {
    const uint64_t fork_id = next_fork_id_++;
    if (!ForkSequence(g.spec.id, g.path, fork_id).ok()) continue;
    bonus.push_back({g.spec.new_tokens.back()});
    Build b;
    b.model_id = fork_id;
    b.spec = &g.spec;
    b.last_tree = &empty;
    b.new_tokens = &bonus.back();
    builds.push_back(std::move(b));
    built.push_back(&g);
  }
  const bool done = !(preemptible && num_foreground_.load() > 0) &&
                    BuildTrees(&builds, preemptible);
  for (size_t k = 0; k < builds.size(); ++k) {
    Build& b = builds[k];
    SeqState* state = seqs_.FindAny(built[k]->spec.id);
    if (!done || !b.status.ok() || state == nullptr) {
      ReleaseSequence(b.model_id);
      continue;
    }
    state->prepared.push_back(
        {built[k]->spec, b.model_id, std::move(b.tree), std::move(b.node_logits)});
  }
  return done;
}

void TreeDrafter::RunPredraftRound() {
  const int round = pending_round_;
  // Per pending seed still waiting for this step: its outcome of this rank.
  std::vector<Guess> guesses;
  bool any = false;  // some seed has an outcome of this rank
  for (const PredraftSeed& seed : pending_) {
    // Find would renew the lease: background work must not keep a sequence.
    SeqState* state = seqs_.IsVisible(seed.id) ? seqs_.FindAny(seed.id) : nullptr;
    if (state == nullptr || state->broken || !seqs_.CheckStep(seed.id, seed.spec.step + 1, "", "").ok()) {
      continue;
    }
    // Ranking is O(nodes * V) per sequence: yield to a waiting call first.
    if (!state->has_outcomes && num_foreground_.load() > 0) break;
    const std::vector<PredictedOutcome>& outcomes = Outcomes(seed.spec, state);
    if (round >= static_cast<int>(outcomes.size())) continue;
    any = true;
    Guess g = GuessOf(seed.spec, state->last_tree, outcomes[round]);
    const bool prepared = std::any_of(state->prepared.begin(), state->prepared.end(),
                                      [&](const Prepared& p) { return SameRequest(p.spec, g.spec); });
    if (!prepared) guesses.push_back(std::move(g));
  }
  const bool done = PrepareGuesses(&guesses, /*preemptible=*/true);
  // A preempted round is retried unless the next Draft replaced the seeds.
  if (!done) return;
  if (++pending_round_ >= options_.predraft || !any) {
    pending_.clear();
    pending_round_ = 0;
  }
}

}  // namespace treespec
