// MambaSequenceModel: a MambaModel and its MambaStatePool as a SequenceModel.
//
// Per sequence: a base slot (the state after the committed prefix), a scratch
// slot (the state after a chain tail) and one slot per tail node (the state
// after that tree node). A chain is prefilled from a copy of the base into
// the scratch slot (one-token chains of many sequences go through one batched
// Step); Commit adopts it by swapping slot ids. A tree is run level by level:
// each new node's slot gets a copy of its parent's state (the base for the
// root) and one batched Step feeds every node of the level, all sequences
// together (paper 000 Sec. 4.1). CommitPath adopts the state of the path's
// last node by swapping slot ids, so nothing is recomputed.
//
// Recurrent state cannot be cut part-way through a chain: Commit takes the
// whole chain or nothing. Hidden states are UNIMPLEMENTED. Thread-compatible.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/mamba.h"
#include "core/model/sequence_model.h"
#include "core/model/ssm_state.h"

namespace treespec {

class MambaSequenceModel final : public SequenceModel {
 public:
  // Slots for `max_sequences` sequences of up to `max_tail_nodes` tree nodes.
  static absl::StatusOr<std::unique_ptr<MambaSequenceModel>> Create(
      std::unique_ptr<MambaModel> model, int64_t max_sequences, int64_t max_tail_nodes);

  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<int64_t> Open(int64_t capacity) override;
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options = {}) override;
  absl::Status Commit(int64_t handle, int64_t n) override;
  absl::Status CommitPath(int64_t handle, const std::vector<int32_t>& path) override;
  absl::StatusOr<int64_t> ForkPath(int64_t handle, const std::vector<int32_t>& path,
                                   int64_t capacity) override;
  void Release(int64_t handle) override;
  int64_t length(int64_t handle) const override;
  absl::StatusOr<SequenceSnapshot> SnapshotState(int64_t handle) override;
  absl::Status RestoreState(int64_t handle, const SequenceSnapshot& snapshot) override;
  absl::Status CopyState(int64_t src, int64_t dst) override;
  SequenceModelStats stats() const override;

  MambaModel* model() { return model_.get(); }

 private:
  struct Seq {
    int32_t base = -1;
    int32_t scratch = -1;
    std::vector<int32_t> nodes;    // nodes[i]: state after tail node i
    int64_t length = 0;
    int64_t chain = 0;             // tokens of a chain tail (0: none)
    std::vector<int32_t> parents;  // of a tree tail (empty: none)
  };
  // One token to feed: the state in `src` is copied to `dst`, then advanced.
  struct Feed {
    int32_t src, dst, token;
    size_t seq;   // index in the Forward batch
    int32_t row;  // logits row within that sequence, -1: none
  };
  MambaSequenceModel() = default;
  absl::StatusOr<Seq*> Get(int64_t handle);
  // Validates a Forward batch; out: each sequence's state.
  absl::Status CheckForward(const std::vector<ForwardSeq>& seqs, std::vector<Seq*>* state);
  // Adds the feeds of tree sequence `s` (index si) to `rounds` by depth.
  absl::Status PlanTree(const ForwardSeq& fs, size_t si, Seq* s,
                        std::vector<std::vector<Feed>>* rounds, int32_t* num_rows);
  // Runs the feeds of one round as one batched Step.
  absl::Status RunRound(const std::vector<Feed>& feeds,
                        std::vector<std::vector<float>>* rows_of_seq);

  ModelInfo info_;
  std::unique_ptr<MambaModel> model_;
  std::unique_ptr<MambaStatePool> pool_;
  int64_t max_sequences_ = 0;
  int64_t max_tail_nodes_ = 0;
  std::map<int64_t, Seq> seqs_;
  int64_t next_id_ = 1;
};

}  // namespace treespec
