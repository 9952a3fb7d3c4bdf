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

void TreeDrafter::RunPredraftRound() {
  const int round = pending_round_;
  // Per pending seed still waiting for this step: its outcome of this rank.
  std::vector<DraftSpec> guesses;  // the next request if the outcome happens
  std::vector<std::vector<int32_t>> bonus;
  std::vector<uint64_t> owners;
  guesses.reserve(pending_.size());
  bonus.reserve(pending_.size());
  const TokenTree empty;
  std::vector<Build> builds;
  for (PredraftSeed& seed : pending_) {
    // Find would renew the lease: background work must not keep a sequence.
    const SeqState* state = seqs_.IsVisible(seed.id) ? seqs_.FindAny(seed.id) : nullptr;
    if (state == nullptr || state->broken || !seqs_.CheckStep(seed.id, seed.spec.step + 1, "", "").ok()) {
      continue;
    }
    if (round == 0 && seed.outcomes.empty()) {
      // Ranking is O(nodes * V) per sequence: yield to a waiting call first.
      if (num_foreground_.load() > 0) break;
      seed.outcomes = PredictOutcomes(seed.tree, seed.node_logits, seed.spec.temperature,
                                      options_.predraft);
    }
    if (round >= static_cast<int>(seed.outcomes.size())) continue;
    const PredictedOutcome& oc = seed.outcomes[round];
    DraftSpec g = seed.spec;
    ++g.step;
    g.new_tokens.clear();
    for (size_t k = 1; k < oc.path.size(); ++k) g.new_tokens.push_back(seed.tree.tokens[oc.path[k]]);
    g.new_tokens.push_back(oc.bonus);
    const uint64_t fork_id = next_fork_id_++;
    if (!ForkSequence(seed.id, oc.path, fork_id).ok()) continue;
    guesses.push_back(std::move(g));
    bonus.push_back({oc.bonus});
    owners.push_back(seed.id);
    Build b;
    b.model_id = fork_id;
    builds.push_back(std::move(b));
  }
  // Pointers into guesses / bonus are stable now that they are complete.
  for (size_t k = 0; k < builds.size(); ++k) {
    builds[k].spec = &guesses[k];
    builds[k].last_tree = &empty;
    builds[k].new_tokens = &bonus[k];
  }
  const bool done = num_foreground_.load() == 0 && BuildTrees(&builds, /*preemptible=*/true);
  for (size_t k = 0; k < builds.size(); ++k) {
    Build& b = builds[k];
    SeqState* state = seqs_.FindAny(owners[k]);
    if (!done || !b.status.ok() || state == nullptr) {
      ReleaseSequence(b.model_id);
      continue;
    }
    state->prepared.push_back(
        {std::move(guesses[k]), b.model_id, std::move(b.tree), std::move(b.node_logits)});
  }
  // A preempted round is retried unless the next Draft replaced the seeds.
  if (!done) return;
  if (++pending_round_ >= options_.predraft || builds.empty()) {
    pending_.clear();
    pending_round_ = 0;
  }
}

}  // namespace treespec
