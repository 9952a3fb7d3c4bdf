// AttentionBatch: host-side description of which cached and new key/value
// positions every query token of a packed forward batch may attend to.
//
// A batch holds S sequences. Sequence s contributes n_s new tokens (a prompt
// chunk, one decode token, or a packed token tree) appended to the paged KV
// cache after its context_lens[s] committed tokens and prior_lens[s] tokens
// already written by earlier calls of the same draft tree (0 except when a
// drafter grows a tree level by level). The "tail" of sequence s is the
// prior_lens[s] + n_s positions after the committed prefix; new token i is
// tail column prior_lens[s] + i, at cache position context_lens[s] + prior + i.
// New token i may attend
//   * every committed position p < context_lens[s], and
//   * tail column j iff mask(s, i, j) holds.
// For a chain (prefill, decode; prior 0) the mask is causal (j <= i). For a
// token tree it is the ancestor-or-self relation, so a node sees exactly the
// tokens on its root-to-node path: its logits equal those of decoding that path
// one token at a time (SpecInfer's tree attention; paper 002 Sec. 3, paper 000
// Sec. 4.1).
//
// Plain data; build once per forward pass and hand to Backend::PlanAttention.
#pragma once

#include <cstdint>
#include <vector>

namespace treespec {

struct AttentionBatch {
  int num_seqs = 0;
  int block_size = 16;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> query_start;   // [S+1] offsets of each sequence's new tokens
  std::vector<int32_t> context_lens;  // [S] committed tokens (fully visible)
  std::vector<int32_t> prior_lens;    // [S] tail tokens written by earlier calls
  std::vector<int32_t> block_tables;  // [S * max_blocks_per_seq], -1 padded
  // Tree masks. mask_offset[s] == -1: causal over new tokens (prior must be 0).
  // Otherwise sequence s has words_s = ceil((prior_s + n_s) / 64) 64-bit words
  // per row, row i (new token i) starting at mask_words[mask_offset[s] + i *
  // words_s]; bit j set = new token i sees tail column j.
  std::vector<int32_t> mask_offset;   // [S]
  std::vector<uint64_t> mask_words;
  // Sliding-window attention (Mistral, Qwen2): 0 = none. Otherwise a query at
  // RoPE position q sees only keys at positions p with q - p < sliding_window
  // (transformers' sliding_window_overlay), on top of the masks above. The
  // position of committed key p is p; that of tail column j is
  // context_lens[s] + TailDepth(s, j), so a tree node's window is taken from
  // its own position (length + depth), as the path decoded alone would be.
  int32_t sliding_window = 0;
  // tail_depth_offset[s] == -1 (or the vector empty): tail column j has depth j
  // (a chain). Otherwise column j's depth is tail_depths[tail_depth_offset[s] + j].
  std::vector<int32_t> tail_depth_offset;  // [S] or empty
  std::vector<int32_t> tail_depths;

  int num_tokens() const { return query_start.empty() ? 0 : query_start.back(); }
  int num_new(int s) const { return query_start[s + 1] - query_start[s]; }
  // Cache slot (block * block_size + offset) of position `pos` of sequence s.
  int32_t Slot(int s, int pos) const {
    return block_tables[s * max_blocks_per_seq + pos / block_size] * block_size +
           pos % block_size;
  }
  int tail_len(int s) const { return prior_lens[s] + num_new(s); }
  // Cache position of new token i of sequence s.
  int Position(int s, int i) const { return context_lens[s] + prior_lens[s] + i; }
  int TailDepth(int s, int j) const {
    if (tail_depth_offset.empty() || tail_depth_offset[s] < 0) return j;
    return tail_depths[tail_depth_offset[s] + j];
  }
  // Whether a query at position q may see a key at position p under the window.
  bool InWindow(int q, int p) const { return sliding_window <= 0 || q - p < sliding_window; }
  // Whether new token i of sequence s sees tail column j (0 <= j < tail_len).
  bool Sees(int s, int i, int j) const {
    if (mask_offset[s] < 0) return j <= prior_lens[s] + i;
    int words = (tail_len(s) + 63) / 64;
    return (mask_words[mask_offset[s] + i * words + j / 64] >> (j % 64)) & 1u;
  }
};

}  // namespace treespec
