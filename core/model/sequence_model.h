// SequenceModel: the one per-sequence model interface every model kind
// implements and every user (worker, drafters, in-process generator, tests)
// goes through, so that a new model kind touches core/model and the factory
// only.
//
// A model owns its per-sequence state (KV cache blocks, recurrent state
// slots). A sequence has
//  - a committed prefix: tokens whose state is final, and
//  - a tail: nodes written by Forward after the prefix but not committed yet.
// Forward writes tail nodes for each sequence of a batch (core/model/
// forward_batch.h): a chain (parents empty, num_prior 0: a prompt chunk,
// replacing the tail) or token-tree nodes (parents over num_prior + n nodes:
// the packed tree after the cached prefix, possibly grown over several calls
// as a drafter does one level at a time). Commit(n) then keeps a whole chain
// and CommitPath(path) keeps a root-to-node path of a tree; the rest of the
// tail is dropped. Release frees everything.
//
// Failures: bad input is INVALID_ARGUMENT naming the field; running out of
// blocks or slots is RESOURCE_EXHAUSTED for the sequence that asked and
// leaves every other sequence untouched; an unknown handle is NOT_FOUND.
// Operations a model kind cannot do are UNIMPLEMENTED.
//
// Thread-compatible: one call at a time (callers hold their own lock).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/model/forward_batch.h"
#include "core/tensor/backend.h"

namespace treespec {

// kMamba2: Mamba2ForCausalLM; kHybrid: Mamba-2 + attention (BambaForCausalLM).
enum class ModelKind { kLlama, kMamba, kMamba2, kHybrid };

// "llama" / "mamba" / "mamba2" / "hybrid": the names drafter --kind and logs use.
const char* ModelKindName(ModelKind kind);

struct ModelInfo {
  ModelKind kind = ModelKind::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  // Recurrent models support SnapshotState / CopyState / RestoreState.
  bool is_recurrent = false;
  // Forward refuses token positions >= this (LlamaConfig::MaxExactPosition:
  // dynamic / longrope RoPE); callers refuse sequences that could reach it.
  int64_t max_positions = std::numeric_limits<int64_t>::max();
};

// Memory accounting in the model's own unit: KV blocks of block_size tokens
// (Llama, hybrid) or recurrent state slots (Mamba, Mamba-2: block_size 0).
struct SequenceModelStats {
  int64_t num_sequences = 0;
  int64_t blocks_used = 0;
  int64_t blocks_free = 0;
  int64_t block_size = 0;
};

// A host copy of one sequence's recurrent state after its committed prefix.
struct SequenceSnapshot {
  std::vector<float> data;
};

class SequenceModel {
 public:
  virtual ~SequenceModel() = default;

  virtual const ModelInfo& info() const = 0;

  // Opens a sequence that may hold `capacity` tokens (committed prefix plus
  // the largest tail). Out: its handle (kv_seq in ForwardSeq).
  virtual absl::StatusOr<int64_t> Open(int64_t capacity) = 0;
  // One batched pass. in: seqs; out: out->logits rows each sequence asked
  // for (row_start), and the hidden states `options` asks for.
  virtual absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                               const ForwardOptions& options = {}) = 0;
  // Keeps the first n tokens of a chain tail.
  virtual absl::Status Commit(int64_t handle, int64_t n) = 0;
  // Keeps tail nodes `path` (strictly increasing: root first, a root-to-node
  // path of a topologically ordered tree) as the next committed tokens.
  virtual absl::Status CommitPath(int64_t handle, const std::vector<int32_t>& path) = 0;
  // Frees the sequence; unknown handles are ignored.
  virtual void Release(int64_t handle) = 0;
  // Committed tokens of the sequence (0 if unknown).
  virtual int64_t length(int64_t handle) const = 0;

  // Recurrent state after the committed prefix (UNIMPLEMENTED for models
  // whose state is a KV cache).
  virtual absl::StatusOr<SequenceSnapshot> SnapshotState(int64_t handle);
  virtual absl::Status RestoreState(int64_t handle, const SequenceSnapshot& snapshot);
  virtual absl::Status CopyState(int64_t src, int64_t dst);
  // Opens a new sequence (room for `capacity` tokens) whose committed prefix
  // is `handle`'s committed prefix followed by its tail nodes `path` (as
  // CommitPath takes it; empty: the prefix alone), with no tail. `handle` is
  // unchanged. The new state equals, bit for bit, what CommitPath(path) would
  // leave in `handle`, so work done on the fork can be adopted in its place
  // (the drafter's pre-drafting). UNIMPLEMENTED where a model cannot fork.
  virtual absl::StatusOr<int64_t> ForkPath(int64_t handle, const std::vector<int32_t>& path,
                                           int64_t capacity);

  virtual SequenceModelStats stats() const = 0;
};

struct SequenceModelOptions {
  // KV cache (Llama): blocks of block_size tokens shared by all sequences.
  int64_t kv_blocks = 4096;
  int64_t kv_block_size = 16;
  // Recurrent models (Mamba, Mamba-2, hybrid): most open sequences and most
  // tail nodes per sequence (Mamba: a state slot each; Mamba-2: a row of
  // cached activations each, for activation replay).
  int64_t max_sequences = 64;
  int64_t max_tail_nodes = 64;
  // CUDA graphs for batched recurrent steps where the backend has them.
  bool use_graphs = false;
  absl::Status Validate() const;
};

// Loads the model in `dir` (kind from its config.json; a "*.gguf" path is a
// llama-family GGUF file, core/model/gguf_model.h) on `backend`, sharded
// over `comm` when it is given with more than one rank (Llama, Mamba-2 and
// hybrid). Neither is owned; both must outlive the model.
absl::StatusOr<std::unique_ptr<SequenceModel>> LoadSequenceModel(
    const std::string& dir, Backend* backend, Communicator* comm,
    const SequenceModelOptions& options);

}  // namespace treespec
