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
// The sequence table (ids, steps, leases) is a SequenceTable. Subclasses
// supply the model hooks: Advance (consume committed tokens and return each
// root's next-token logits) and Expand (feed one level of new nodes).
// Thread-safe: one mutex around every public call.
#pragma once

#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/model/sequence_table.h"
#include "drafter_service/drafter.h"

namespace treespec {

class TreeDrafter : public Drafter {
 public:
  std::vector<absl::Status> Open(const std::vector<DrafterOpenSpec>& specs) override;
  std::vector<DraftOutcome> Draft(const std::vector<DraftSpec>& specs) override;
  int Release(const std::vector<uint64_t>& ids) override;
  int ReleaseExpired() override;
  DrafterStats Stats() const override;

 protected:
  explicit TreeDrafter(const DrafterOptions& options)
      : options_(options),
        seqs_(SequenceTableOptions{options.max_sequences, options.sequence_lease}) {}

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
  };

  // Model hooks, called with mu_ held.
  virtual absl::Status OpenSequence(uint64_t id, const std::vector<int32_t>& prompt) = 0;
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

  const DrafterOptions options_;
  mutable absl::Mutex mu_;

 private:
  struct SeqState {
    TokenTree last_tree;  // empty before the first draft
    // Set when a failure left the model state part-advanced: every later
    // Draft fails with FAILED_PRECONDITION until the caller reopens it.
    bool broken = false;
  };
  // Checks one DraftSpec against the table; OK when it may be drafted.
  absl::Status CheckDraft(const DraftSpec& s, BatchIds* ids, SeqState** state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SequenceTable<SeqState> seqs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
