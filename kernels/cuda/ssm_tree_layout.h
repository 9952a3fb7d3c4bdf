// Host-side layout of an SsmTreeBatch (core/tensor/ssm_tree_batch.h) for the
// CUDA Mamba-2 tree ops: the batch checked, then flattened into one i32
// array that is uploaded once per op and read by the kernels through the
// index structs of ssm_tree_math.h. Plain C++ (no CUDA header), so the
// layout can be built and checked anywhere.
//
// The scan's layout is the chunked matrix form of ssm_tree_scan.cu: rows
// whose depth (counted from the committed state, a root at depth 0) is
// chunk - 1 modulo `chunk` are anchors; a row's segment is its root path
// after its nearest strict anchor ancestor (or from the committed state), at
// most `chunk` rows, root first. The state rows are the anchors with a child
// and the rows whose state is written out.
//
// Thread-compatible: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor/ssm_tree_batch.h"

namespace treespec::cuda {

// OK when `batch` is a planned batch of R rows over a pool of S slots whose
// parents precede their rows and share their slot, and whose outputs name a
// row of the batch and a slot that no row reads (what SsmTreeBatch::Plan
// checks; the kernels rely on it for memory safety and to run rows and
// outputs concurrently). INVALID_ARGUMENT naming `op` and the offending row
// or output otherwise.
absl::Status CheckSsmTreeBatch(const char* op, const SsmTreeBatch& batch, int64_t R, int64_t S);

// The batch's outputs as (row, slot) pairs in order, a slot written twice
// kept only for its last output (sequential semantics: the last write wins).
std::vector<std::pair<int32_t, int32_t>> SsmTreeOutputs(const SsmTreeBatch& batch);

// SsmTreeConv: packed = src [R·K] | slot [R] | out_row [O] | out_slot [O].
// src[r·K + k] is the row whose input is window entry k of row r (oldest
// first), or -1 - e for entry e of the committed conv state.
struct SsmConvLayout {
  int32_t num_rows = 0, K = 0, num_out = 0;
  int64_t src = 0, slot = 0, out_row = 0, out_slot = 0;  // offsets into packed
  std::vector<int32_t> packed;
};
SsmConvLayout LayoutSsmTreeConv(const SsmTreeBatch& batch, int K);

// SsmTreeScan. Per row: parent, slot, seg_off / seg_len (its segment's
// entries in a CSR of num_entries entries, filled on the device from the
// parents), start (the state index of its anchor, -1: the committed state).
// Per state row: state_row (its row, increasing) and state_off (its
// segment's coefficients in a CSR of num_state_entries). Per output:
// out_state (state index) and out_slot.
struct SsmScanLayout {
  int32_t num_rows = 0, chunk = 0, num_states = 0, num_out = 0;
  int64_t num_entries = 0, num_state_entries = 0;
  int64_t parent = 0, slot = 0, seg_off = 0, seg_len = 0, start = 0;  // offsets into packed
  int64_t state_row = 0, state_off = 0, out_state = 0, out_slot = 0;
  std::vector<int32_t> packed;
};
// The smallest chunk of kMinScanChunk, 2·kMinScanChunk, ... kMaxScanChunk
// whose state rows hold at most `state_budget_bytes` of f32 states of
// `state_floats` (H·P·N) each (kMaxScanChunk when none does).
constexpr int32_t kMinScanChunk = 64;
constexpr int32_t kMaxScanChunk = 1024;
SsmScanLayout LayoutSsmTreeScan(const SsmTreeBatch& batch, int64_t state_floats,
                                int64_t state_budget_bytes);
// The same with a given chunk (>= 1).
SsmScanLayout LayoutSsmTreeScanWithChunk(const SsmTreeBatch& batch, int32_t chunk);

}  // namespace treespec::cuda
