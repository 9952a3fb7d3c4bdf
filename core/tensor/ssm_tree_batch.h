// SsmTreeBatch: host-side description of one pass of Mamba-2 layers over
// packed token trees (STree, paper 001 §3), the SSM counterpart of
// AttentionBatch.
//
// The pass has R rows. Row r is one token whose conv input and SSM
// parameters are row r of the op inputs; parent[r] < r is the row of the
// token before it on its root-to-token path, or -1 when the token directly
// follows the committed state of its sequence, held in state slot slot[r]
// (conv state [Cd, K] and SSM state [H, P, N] of the state pools). A chain
// (a prompt) is the tree whose parents are r - 1; several sequences' trees
// sit side by side in one batch. Rows whose outputs a caller ignores (tree
// nodes of earlier calls, needed only as ancestors) are rows like any other.
//
// Besides the per-row outputs, an op writes the state after row
// out_rows[i] (the conv window and SSM state there) into slot out_slots[i]:
// the final state of a prompt chunk, or of an accepted path when states are
// recovered by activation replay (paper 001 Alg. 1). An output slot is never
// one that a row of the same batch reads.
//
// Plan() checks all this and assigns each row a scratch buffer for its SSM
// state: a row takes over its parent's buffer when it is the parent's last
// child (nothing reads the parent afterwards), else a free one, and a
// childless row frees its buffer once done. A chain then needs one buffer
// and a tree as many as it has branches alive at once, so a recurrent scan
// holds num_buffers states per head instead of one per row.
//
// Plain data; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace treespec {

struct SsmTreeBatch {
  std::vector<int32_t> parent;     // [R] row of the parent (< r), -1: the committed state
  std::vector<int32_t> slot;       // [R] committed-state slot of the row's sequence
  std::vector<int32_t> out_rows;   // rows whose state is written out ...
  std::vector<int32_t> out_slots;  // ... into these slots, one each
  // Filled by Plan().
  std::vector<int32_t> buffer;  // [R] scratch buffer holding the row's SSM state
  int32_t num_buffers = 0;

  int32_t num_rows() const { return static_cast<int32_t>(parent.size()); }
  // Appends a sequence of n rows after the state in `state_slot`: `parents`
  // (n entries, each -1 or < its own index, relative to this sequence) or,
  // when empty, a chain. Returns the first row of the sequence.
  int32_t AddSequence(int32_t state_slot, int32_t n, const std::vector<int32_t>& parents);
  // INVALID_ARGUMENT naming the row when a parent does not precede its row or
  // belongs to another slot, an output row or slot is out of range
  // ([0, num_slots)), an output row or slot is listed twice, or an output
  // slot is read by the batch; then fills
  // buffer and num_buffers.
  absl::Status Plan(int64_t num_slots);
};

}  // namespace treespec
