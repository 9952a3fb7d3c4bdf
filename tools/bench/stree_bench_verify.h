// The two ways stree_bench verifies a token tree over a committed prompt,
// each on a HybridSequenceModel of its own (pools sized for that method):
//
//  - kTree: treespec's. One Forward of the packed tree per sequence (the
//    STree tree scan, paper 001 §3), then CommitPath of the accepted path
//    (activation replay, Alg. 1).
//  - kUnrolled: the baseline of paper 001 §5.1 as an engine without a tree
//    scan runs it. Each root-to-leaf branch is a sequence of its own with a
//    copy of the committed state (ForkPath: the Mamba-2 states, and the KV
//    of the attention layers, copied per branch; branch 0 is the sequence
//    itself), all branches go through one batched Forward as chains, then
//    the branch holding the accepted path (branch 0) commits it and the
//    other branches are released. Both methods end in the same committed
//    state, which the runner checks.
//
// The accepted path is the first `accept` nodes of branch 0 (the leftmost
// branch): the unrolled method adopts its own branch, the cheapest adoption
// it has. Tokens are deterministic. Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/forward_batch.h"
#include "core/model/hybrid_sequence_model.h"
#include "tools/bench/stree_bench_shapes.h"

namespace treespec::bench {

enum class Method { kTree, kUnrolled };
const char* MethodName(Method m);

// One timed verify (milliseconds): forks (unrolled only), the Forward, then
// commit and release, in wall time; and the process's CPU time over all of it
// (all threads), which a shared machine's other load disturbs less.
struct VerifySample {
  double fork_ms = 0, forward_ms = 0, commit_ms = 0;
  double cpu_ms = 0;
  double total_ms() const { return fork_ms + forward_ms + commit_ms; }
};

// What one verify held beyond its B sequences at rest (committed prompt,
// nothing else), in bytes, from the model's pools and the backend's
// allocator. slots / scan_buffers are counts.
struct VerifyMemory {
  int64_t slots = 0;         // state slots held by the B sequences and their forks
  int64_t scan_buffers = 0;  // SsmTreeBatch::Plan's live-branch buffers (one head each)
  int64_t state_bytes = 0;   // slots beyond those at rest
  int64_t kv_bytes = 0;      // KV blocks beyond those at rest (tails, forks' copies)
  int64_t cache_bytes = 0;   // activation-cache rows written (one per new token)
  int64_t act_bytes = 0;     // allocator peak over the verify: activations, workspace
  int64_t logits_bytes = 0;  // the logits returned to the host
  int64_t rest_bytes = 0;    // the B sequences at rest
  int64_t extra() const { return state_bytes + kv_bytes + cache_bytes + act_bytes + logits_bytes; }
};

// Bytes per state slot, activation-cache row and KV block, from the pools'
// tensors.
struct UnitBytes {
  int64_t slot = 0, cache_row = 0, kv_block = 0;
};

class VerifyArm {
 public:
  struct Options {
    int max_batch = 1;
    int prompt = 128;
    int accept = 0;  // nodes of the accepted path (1 .. tree depth)
    int64_t kv_block_size = 16;
  };
  // The model's pools for `max_batch` sequences verified by `method`, and a
  // prefilled prompt sequence that every verified sequence forks from.
  static absl::StatusOr<std::unique_ptr<VerifyArm>> Create(Method method, const BenchModel& model,
                                                           const BenchTree& tree,
                                                           const Options& options,
                                                           Backend* backend);
  // Bytes the pools of `method` would take for `max_batch` sequences (the
  // weights excluded), to refuse a configuration that would not fit.
  static int64_t EstimatePoolBytes(Method method, const BenchModel& model, const BenchTree& tree,
                                   const Options& options);

  // Opens `batch` sequences at the committed prompt (untimed setup).
  absl::Status Open(int batch);
  // Verifies the tree on every open sequence. out: node logits (rows as
  // ForwardOutput::row_start gives them: a tree per sequence, or a chain
  // per branch, sequence-major). With `mem`, also measures memory (slower:
  // the workspace is dropped first, so do not time that call).
  absl::StatusOr<VerifySample> Verify(ForwardOutput* out, VerifyMemory* mem);
  // After Verify: feeds one more token to every sequence. out: logits [B, V]
  // and, for pure Mamba-2 models, each sequence's committed state.
  absl::Status Continue(std::vector<float>* logits, std::vector<std::vector<float>>* states);
  // Releases the open sequences.
  void Close();

  Method method() const { return method_; }
  int64_t weight_bytes() const { return weight_bytes_; }
  const UnitBytes& unit_bytes() const { return unit_; }
  // The accepted path (node ids of the tree).
  const std::vector<int32_t>& accepted() const { return accepted_; }
  ~VerifyArm();

 private:
  VerifyArm() = default;
  absl::Status Prefill();
  int32_t Token(int b, int32_t node) const;
  std::vector<ForwardSeq> Batch() const;
  absl::Status Fork(std::vector<int64_t>* forks);
  absl::Status Commit();
  // Slots and KV blocks in use now.
  std::pair<int64_t, int64_t> Usage() const;

  Method method_ = Method::kTree;
  BenchTree tree_;
  Options options_;
  Backend* backend_ = nullptr;
  std::unique_ptr<HybridSequenceModel> model_;
  int64_t vocab_ = 0;
  int64_t prompt_seq_ = -1;
  std::vector<int64_t> open_;   // the verified sequences
  std::vector<int64_t> forks_;  // unrolled: branches 1.. of each sequence, while verifying
  std::vector<int32_t> accepted_;
  int64_t weight_bytes_ = 0;
  UnitBytes unit_;
  int64_t rest_slots_ = 0, rest_blocks_ = 0;  // one sequence at rest
  int64_t open_extra_blocks_ = 0;             // KV the open sequences reserved beyond rest
};

}  // namespace treespec::bench
