// HybridSequenceModel: a HybridModel (Mamba2ForCausalLM, BambaForCausalLM),
// its Mamba2StatePool and, with attention layers, its PagedKvCache, as a
// SequenceModel.
//
// Per sequence: a base slot (the Mamba-2 states after the committed prefix),
// a scratch slot, max_tail_nodes rows of the activation cache (one per tail
// node) and, with attention layers, a KV cache sequence reserved for its
// whole capacity at Open. A Forward writes no committed state: chains and
// trees both go through the tree scan from the base slot (a chain is the
// tree whose parents are i - 1), every new token keeps its conv input and dt
// in its cache row (chains longer than max_tail_nodes keep none), and a
// chain's final state goes to the scratch slot.
//
// Commit of a whole chain adopts the scratch slot; CommitPath, and Commit of
// part of a chain, recover the state after the accepted node by activation
// replay (paper 001 Alg. 1: HybridModel::Replay from the base into the
// scratch slot, then the two swap), so nothing but the conv and the
// recurrence along the path is recomputed; attention layers compact their KV
// as Llama does. ForkPath replays into the fork's own base slot. The
// replayed state equals, bit for bit on the CPU, what feeding the accepted
// tokens one by one would have left.
//
// Snapshot / Restore / CopyState exist for pure Mamba-2 models (the state is
// the slots); with attention layers they are UNIMPLEMENTED (the KV cache is
// state too). Running out of sequences, slots or KV blocks is
// RESOURCE_EXHAUSTED for the sequence that asked. Thread-compatible.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/hybrid.h"
#include "core/model/kv_cache.h"
#include "core/model/mamba2_state.h"
#include "core/model/sequence_model.h"

namespace treespec {

class HybridSequenceModel final : public SequenceModel {
 public:
  // KV blocks (attention layers), max_sequences and max_tail_nodes from `options`.
  static absl::StatusOr<std::unique_ptr<HybridSequenceModel>> Create(
      std::unique_ptr<HybridModel> model, const SequenceModelOptions& options);

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

  // Host copy of the Mamba-2 states after the committed prefix, every layer:
  // conv states [Cd, K], then SSM states [H, P, N] (this rank's share).
  absl::StatusOr<std::vector<float>> CommittedState(int64_t handle);
  HybridModel* model() { return model_.get(); }
  Mamba2StatePool* pool() { return pool_.get(); }
  PagedKvCache* kv_cache() { return kv_.get(); }  // null without attention layers

 private:
  struct Seq {
    int64_t kv = -1;    // KV cache sequence (attention layers), -1: none
    int32_t index = -1;  // owns cache rows [index · max_tail, (index + 1) · max_tail)
    int32_t base = -1, scratch = -1;
    int64_t length = 0;
    int64_t chain = 0;          // tokens of a chain tail (0: none)
    bool chain_cached = false;  // the chain's activations are in the cache
    std::vector<int32_t> parents;  // of a tree tail (empty: none)
    void DropTail() {
      chain = 0;
      chain_cached = false;
      parents.clear();
    }
  };
  HybridSequenceModel() = default;
  absl::StatusOr<Seq*> Get(int64_t handle);
  // A new sequence; its KV sequence is `kv` when >= 0 (a fork's), else opened
  // with `capacity` reserved.
  absl::StatusOr<int64_t> OpenWith(int64_t capacity, int64_t kv);
  // Validates a Forward batch (nothing changes on error); out: each
  // sequence's state and the Mamba-2 side of the pass.
  absl::Status PlanForward(const std::vector<ForwardSeq>& seqs, std::vector<Seq*>* state,
                           SsmPass* pass);
  // One sequence of a Forward batch against its state: tokens, capacity,
  // tree shape, prior nodes.
  absl::Status CheckForwardSeq(const ForwardSeq& fs, const Seq& s) const;
  // INVALID_ARGUMENT unless `path` is a root-to-node path of s's tail.
  absl::Status CheckPath(const Seq& s, const std::vector<int32_t>& path) const;
  // Writes into slot `to` the state after s's committed prefix and tail
  // nodes `path` (checked): a copy or the chain's final state where that is
  // it, else activation replay.
  absl::Status StateAfter(const Seq& s, const std::vector<int32_t>& path, int32_t to);
  int32_t CacheRow(const Seq& s, int32_t node) const {
    return static_cast<int32_t>(s.index * max_tail_nodes_ + node);
  }

  ModelInfo info_;
  std::unique_ptr<HybridModel> model_;
  std::unique_ptr<Mamba2StatePool> pool_;
  std::unique_ptr<PagedKvCache> kv_;  // null without attention layers
  int64_t max_sequences_ = 0;
  int64_t max_tail_nodes_ = 0;
  std::vector<int32_t> free_indices_;
  std::map<int64_t, Seq> seqs_;
  int64_t next_id_ = 1;
};

}  // namespace treespec
