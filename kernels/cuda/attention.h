// Attention over the paged KV cache with tree (ancestor) masks, for decode,
// tree verification and prefill alike (host planner + launcher).
//
// Work is split into items: an item is up to `rows_per_block` query rows of
// one sequence, where the rows of sequence s are its new tokens × the query
// heads sharing one kv head (GQA: K/V are read once per group), over a key
// range [key_begin, key_end) of that sequence's cache positions (committed
// prefix, then the tail: prior tokens of a tree grown over several calls,
// then the new tokens; see core/tensor/attention_batch.h). Long key ranges
// with few rows are split across several items (flash-decoding) whose
// partial softmax states are merged by a second kernel. The plan depends only
// on the AttentionBatch and the head layout, so it is built once per forward
// pass and reused by every layer.
//
// Thread-compatible: PlanAttentionWork is a pure function; the launcher
// enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor/attention_batch.h"
#include "core/tensor/dtype.h"

namespace treespec::cuda {

struct AttentionItem {
  int32_t seq;
  int32_t row0;       // first row (token-major: row = token · group + head-in-group)
  int32_t key_begin;  // positions [key_begin, key_end) of the sequence
  int32_t key_end;
  int32_t partial;    // -1: write `out` directly; else this item's partial slot
};

// Items [first, first + num_splits) hold partial states for one row block.
struct AttentionGroup {
  int32_t seq;
  int32_t row0;
  int32_t first;
  int32_t num_splits;
};

struct AttentionWork {
  int rows_per_block = 1;  // 1, 4 or 8
  std::vector<AttentionItem> items;
  std::vector<AttentionGroup> groups;  // only row blocks that were split
  int num_partials = 0;
};

// group = H / Hkv. Aims at about two blocks per SM when rows are few.
AttentionWork PlanAttentionWork(const AttentionBatch& batch, int group, int Hkv, int num_sms);

struct AttentionArgs {
  DType dtype = DType::kF16;
  const void* q = nullptr;        // in: q [T, H, Dh]
  const void* k_cache = nullptr;  // in: k_cache [num_slots, Hkv, Dh]
  const void* v_cache = nullptr;  // in: v_cache [num_slots, Hkv, Dh]
  void* out = nullptr;            // out: out [T, H, Dh]
  const int32_t* query_start = nullptr;   // in: [S + 1]
  const int32_t* context_lens = nullptr;  // in: [S] committed tokens (fully visible)
  const int32_t* prior_lens = nullptr;    // in: [S] tail tokens written by earlier calls
  const int32_t* block_tables = nullptr;  // in: [S, max_blocks_per_seq]
  const int32_t* mask_offset = nullptr;   // in: [S] (-1: causal)
  const uint64_t* mask_words = nullptr;   // in: tree masks (AttentionBatch layout)
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int H = 0, Hkv = 0, Dh = 0;
  float scale = 1.0f;
  const AttentionItem* items = nullptr;    // in: [num_items] on the device
  int num_items = 0;
  const AttentionGroup* groups = nullptr;  // in: [num_groups] on the device
  int num_groups = 0;
  int rows_per_block = 1;
  float* partials = nullptr;  // scratch: AttentionPartialFloats(...) floats
  int max_smem_bytes = 48 * 1024;  // the device's opt-in shared-memory limit per block
};

size_t AttentionPartialFloats(const AttentionWork& work, int Hkv, int Dh);

// Requires Dh a multiple of 16 bytes' worth of elements, Dh <= 256, and the
// caches 16-byte aligned (cudaErrorInvalidValue otherwise).
cudaError_t LaunchAttention(const AttentionArgs& args, cudaStream_t stream);

}  // namespace treespec::cuda
