// TreeDrafter: the shape-driven tree construction shared by drafter kinds.
//
// Trees are drafted as batched generation (paper 000, Sec. 4.1): level i of a
// tree of shape (N1, ..., Nγ) holds B_i = N1·…·Ni nodes, each node at level
// i-1 getting N_i children, and every level of every sequence in the batch is
// fed to the model in ONE batched call. With temperature 0 a node's children
// are its N most likely tokens; otherwise they are sampled without replacement
// from q = top-k of softmax(logits / T) (Philox stream kDraft keyed by seed,
// step and node), and q is sent with the tree so the target can run
// multi-round speculative sampling (core/spec/verify.h states the contract).
// Leaves are fed too, so every node of the last tree has its state and the
// next call only needs the bonus token.
//
// Pre-drafting (DrafterOptions::predraft > 0; predraft_outcomes.h): after
// answering a Draft, a background thread takes the most likely verification
// outcomes of each answered tree and drafts the next step's tree for each on
// a fork of the sequence's state (ForkSequence: the state the real commit of
// that outcome would leave, bit for bit), guessing that the next request
// keeps the shape, temperature, top_k and seed. Rank r of every sequence is
// built together as one batched draft. When the next Draft's spec equals a
// prepared one, the fork is adopted in place of the sequence's state and the
// prepared tree returned: the tree, q and Philox keys are exactly what the
// normal draft would have produced, because it IS that draft, run earlier.
// Otherwise the forks are dropped and the draft runs normally. A real call
// preempts background work between levels (the round in flight is dropped).
//
// Draft-ahead (DraftAhead; DraftRequest.ahead): the coordinator asks for the
// next step's trees of the most likely outcomes itself, beside the Verify of
// the last tree, instead of sending the next Draft after it. The same forks
// and the same BuildTrees produce them (in the foreground, all ranks of all
// items as one batch, reusing what the background already prepared), they
// stay prepared, and the commit that follows (a Draft whose new_tokens are the
// outcome that happened) adopts the matching fork as any pre-draft hit does.
//
// Prefill never stalls live streams (issue 10 point 3): Open feeds prompts in
// chunks of at most DrafterOptions::prefill_chunk_tokens and releases the
// mutex between chunks, letting waiting Draft calls go first, so a live
// sequence's draft waits for at most one chunk of somebody else's prompt. A
// sequence being prefilled is invisible to Draft (NOT_FOUND) until its Open
// returns, but holds its id and its capacity; a Release meanwhile cancels it
// after the current chunk.
//
// The sequence table (ids, steps, leases) is a SequenceTable. Subclasses
// supply the model hooks: OpenSequence / PrefillChunk (consume prompt tokens),
// Advance (consume committed tokens and return each root's next-token logits)
// and Expand (feed one level of new nodes).
// Thread-safe: one mutex around every public call (Open takes it once per
// prompt chunk) and the background work.
#pragma once

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/model/sequence_table.h"
#include "drafter_service/drafter.h"
#include "drafter_service/predraft_outcomes.h"

namespace treespec {

class TreeDrafter : public Drafter {
 public:
  std::vector<absl::Status> Open(const std::vector<DrafterOpenSpec>& specs) override;
  std::vector<DraftOutcome> Draft(const std::vector<DraftSpec>& specs) override;
  int32_t max_ahead_candidates() const override {
    return options_.draft_ahead ? options_.predraft : 0;
  }
  int64_t max_ahead_batch() const override { return options_.predraft_max_batch; }
  std::vector<AheadOutcome> DraftAhead(const std::vector<DraftSpec>& specs,
                                       const std::vector<AheadSpec>& ahead,
                                       std::vector<DraftOutcome>* drafted) override;
  int Release(const std::vector<uint64_t>& ids) override;
  int ReleaseExpired() override;
  DrafterStats Stats() const override;
  ~TreeDrafter() override;

  void WaitIdle() override;

 protected:
  explicit TreeDrafter(const DrafterOptions& options);
  // Subclasses call this last in their destructor (the thread uses the hooks).
  void StopPredraft();

  // A node to feed: sequence `id`, its `node` index in the tree being built,
  // whose state derives from `parent`'s, carrying `token`.
  struct NodeFeed {
    uint64_t id;
    int32_t node;
    int32_t parent;
    int32_t token;
  };
  // A sequence to advance: its last tree (may be empty before the first
  // draft) and the committed tokens since.
  struct AdvanceItem {
    uint64_t id;
    const TokenTree* last_tree;
    const std::vector<int32_t>* new_tokens;
    const std::vector<float>* features;  // DraftSpec::features
  };

  // A piece of one sequence's prompt: tokens [begin, end) of `prompt`.
  struct PromptChunk {
    uint64_t id;
    const std::vector<int32_t>* prompt;
    size_t begin;
    size_t end;
    const std::vector<float>* features;  // DrafterOpenSpec::features
  };

  // Model hooks, called with mu_ held.
  // Opens model state for `spec.id` with room for its prompt (fed by
  // PrefillChunk) and its trees; checks the spec's kind-specific fields.
  virtual absl::Status OpenSequence(const DrafterOpenSpec& spec) = 0;
  // Consumes each chunk's tokens as committed (one batched call). Per-chunk
  // failures go to `status`; the caller then releases that sequence.
  virtual void PrefillChunk(const std::vector<PromptChunk>& chunks,
                            std::vector<absl::Status>* status) = 0;
  // Kind-specific checks of a request before anything changes (e.g. the
  // features' size); a failure leaves the sequence as it was.
  virtual absl::Status CheckDraftSpec(const DraftSpec& spec) const { return absl::OkStatus(); }
  virtual void ReleaseSequence(uint64_t id) = 0;
  // Consumes each item's new tokens (reusing the last tree's node states along
  // the accepted path) and writes each new root's next-token logits
  // [items.size(), V] into `logits`. Per-item failures go to `status`.
  virtual void Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
                       std::vector<absl::Status>* status) = 0;
  // Feeds one level of new nodes (all sequences together). `tree_of(id)` gives
  // each sequence's tree so far (nodes up to and including this level).
  // out: logits [feeds.size(), V].
  virtual absl::Status Expand(const std::vector<NodeFeed>& feeds,
                              const std::map<uint64_t, TokenTree>& trees,
                              std::vector<float>* logits) = 0;
  virtual DrafterStats ModelStats() const = 0;
  // Pre-drafting: a new model sequence `fork_id` holding `id`'s committed
  // state followed by its last tree's nodes `path` (root first), as if
  // committed; `id` is unchanged. Adopt makes `fork_id`'s state `id`'s (the
  // old one is freed and `fork_id` ceases to exist).
  virtual absl::Status ForkSequence(uint64_t id, const std::vector<int32_t>& path,
                                    uint64_t fork_id) = 0;
  virtual void AdoptSequence(uint64_t fork_id, uint64_t id) = 0;

  const DrafterOptions options_;
  mutable absl::Mutex mu_;

 private:
  // A tree pre-drafted for a guessed next DraftSpec, on model sequence fork_id.
  struct Prepared {
    DraftSpec spec;
    uint64_t fork_id = 0;
    TokenTree tree;
    std::vector<std::vector<float>> node_logits;
  };
  struct SeqState {
    TokenTree last_tree;  // empty before the first draft
    // With pre-drafting: the drafter's next-token logits after every node of
    // last_tree [num_nodes][V], and its outcomes ranked (PredictOutcomes,
    // options_.predraft of them; computed on first use). num_nodes x V x 4
    // bytes per sequence (512 KB for 64 nodes of the demo's 2048 tokens,
    // 8 MB for a 32k vocabulary), as each prepared fork holds its own.
    std::vector<std::vector<float>> last_node_logits;
    std::vector<PredictedOutcome> outcomes;
    bool has_outcomes = false;
    // Set when a failure left the model state part-advanced: every later
    // Draft fails with FAILED_PRECONDITION until the caller reopens it.
    bool broken = false;
    std::vector<Prepared> prepared;
    // Release while its Open was prefilling: the Open cancels it.
    bool release_requested = false;
  };
  // A sequence of an Open call being prefilled.
  struct Opening {
    size_t index;  // in the Open call's specs
    bool done = false;
  };
  // One tree to build on model sequence `model_id` (the sequence's own or a
  // fork). out: status, tree, node_logits [num_nodes][V].
  struct Build {
    uint64_t model_id = 0;
    const DraftSpec* spec = nullptr;
    const TokenTree* last_tree = nullptr;
    const std::vector<int32_t>* new_tokens = nullptr;
    absl::Status status;
    TokenTree tree;
    std::vector<std::vector<float>> node_logits;
  };
  // What the background thread pre-drafts from: an answered request (its
  // tree and logits are the sequence's last_tree and last_node_logits while
  // its step is the last one).
  struct PredraftSeed {
    uint64_t id;
    DraftSpec spec;
  };
  // A guessed next request of sequence `spec.id` for the outcome whose
  // accepted path in its last tree is `path` (root first).
  struct Guess {
    DraftSpec spec;
    std::vector<int32_t> path;
  };

  // Open's steps: check and insert hidden (statuses to `out`); feed the
  // chunk at `offset` of every unfinished opening; publish the finished.
  std::vector<Opening> BeginOpen(const std::vector<DrafterOpenSpec>& specs,
                                 std::vector<absl::Status>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FeedChunk(const std::vector<DrafterOpenSpec>& specs, size_t offset, size_t chunk,
                 std::vector<Opening>* work, std::vector<absl::Status>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailOpen(uint64_t id, absl::Status st, absl::Status* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks one DraftSpec against the table; OK when it may be drafted.
  absl::Status CheckDraft(const DraftSpec& s, BatchIds* ids, SeqState** state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs Advance then every level for `builds` as one batch. When
  // `preemptible`, returns false (builds left undefined) as soon as a public
  // call waits for mu_ between levels.
  bool BuildTrees(std::vector<Build>* builds, bool preemptible) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds mu_ for a public call; background work yields while one waits.
  class ABSL_SCOPED_LOCKABLE ForegroundLock {
   public:
    explicit ForegroundLock(const TreeDrafter* d) ABSL_EXCLUSIVE_LOCK_FUNCTION(d->mu_) : d_(d) {
      d_->num_foreground_.fetch_add(1);
      d_->mu_.Lock();
      d_->num_foreground_.fetch_sub(1);
    }
    ~ForegroundLock() ABSL_UNLOCK_FUNCTION() { d_->mu_.Unlock(); }

   private:
    const TreeDrafter* d_;
  };
  // The request a prepared tree was drafted for, field by field.
  static bool SameRequest(const DraftSpec& a, const DraftSpec& b);
  // Frees a sequence's prepared forks.
  void DropPrepared(SeqState* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Draft's body, with mu_ held; `t0`: the call's arrival.
  std::vector<DraftOutcome> DraftLocked(const std::vector<DraftSpec>& specs, absl::Time t0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A prepared tree for exactly `s`: adopted into `*o` (true); otherwise the
  // sequence's prepared forks are dropped (a miss, or none prepared).
  bool TakePrepared(const DraftSpec& s, SeqState* state, DraftOutcome* o)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A hit: `p` (a prepared fork of `s.id`) becomes the sequence's state.
  void AdoptPrepared(const DraftSpec& s, SeqState* state, Prepared p, DraftOutcome* o)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ranked outcomes of `state`'s last tree (computed once per tree).
  const std::vector<PredictedOutcome>& Outcomes(const DraftSpec& spec, SeqState* state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next request of `spec`'s sequence if outcome `oc` happens.
  static Guess GuessOf(const DraftSpec& spec, const TokenTree& tree, const PredictedOutcome& oc);
  // Forks and drafts `guesses` as one batch; each tree built joins its
  // sequence's prepared list. Returns false (nothing kept) when
  // `preemptible` and a public call started waiting.
  bool PrepareGuesses(std::vector<Guess>* guesses, bool preemptible)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One ahead item: checks it, then fills `guesses` with the ranks not
  // prepared yet (dropping prepared trees of other guesses).
  absl::Status PlanAhead(const AheadSpec& a, std::vector<Guess>* guesses)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prepared trees of an ahead item's guesses, in rank order.
  void CollectAhead(const AheadSpec& a, AheadOutcome* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pre-drafting thread: one round (one outcome rank of every pending seed)
  // per hold of mu_.
  void PredraftLoop();
  void RunPredraftRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PredraftReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PredraftIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the tree answered for `s` seeds pre-drafting (predraft_sampled).
  bool WantsPredraft(const DraftSpec& s) const;

  SequenceTable<SeqState> seqs_ ABSL_GUARDED_BY(mu_);
  // Public calls waiting for mu_: the background and a prefilling Open yield
  // to them.
  mutable std::atomic<int> num_foreground_{0};
  // The last Draft's answered trees and the next outcome rank to pre-draft.
  std::vector<PredraftSeed> pending_ ABSL_GUARDED_BY(mu_);
  int pending_round_ ABSL_GUARDED_BY(mu_) = 0;
  bool predraft_busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_fork_id_ ABSL_GUARDED_BY(mu_) = uint64_t{1} << 63;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unprepared_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace treespec
