// PagedKvCache: per-layer key/value pools split into fixed-size blocks, with a
// block table per sequence (vLLM's PagedAttention layout).
//
// A sequence's committed length is the number of tokens whose K/V are final.
// A forward pass writes new tokens at positions [length, length + n) (space
// reserved first with Reserve); the caller then either commits them all
// (Commit, for prompts and chains) or keeps only an accepted root-to-node path
// of a token tree (CommitPath, the KV compaction of tree verification).
// Running out of blocks is RESOURCE_EXHAUSTED for the sequence that asked and
// leaves every other sequence untouched.
//
// Not thread-safe: owned by one worker thread.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/attention_batch.h"
#include "core/tensor/backend.h"

namespace treespec {

struct KvCacheOptions {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;  // heads held by this rank
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  absl::Status Validate() const;
};

class PagedKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheOptions& options,
                                                             Backend* backend);

  int64_t CreateSequence();
  bool HasSequence(int64_t seq) const { return seqs_.count(seq) > 0; }
  // Ensures room for `total_len` tokens; all-or-nothing.
  absl::Status Reserve(int64_t seq, int64_t total_len);
  int64_t length(int64_t seq) const;
  int64_t capacity(int64_t seq) const;
  // length += n (the n tokens after length were written by a forward pass).
  absl::Status Commit(int64_t seq, int64_t n);
  // KV compaction: of the tokens written at [length, length + n), keep those at
  // relative indices `path` (strictly increasing, as a root-to-node path of a
  // topologically ordered tree is), moving them to [length, length + |path|).
  // Copying in increasing order is safe: destination k <= path[k] and every
  // later source path[j] > path[k] >= k is never overwritten before it is read.
  absl::Status CommitPath(int64_t seq, const std::vector<int32_t>& path);
  // A new sequence with room for `capacity` tokens holding `seq`'s committed
  // K/V followed by its tail tokens at relative indices `path` (as CommitPath
  // takes them), all committed: the state CommitPath(seq, path) would leave,
  // copied row for row. `seq` is unchanged; all-or-nothing.
  absl::StatusOr<int64_t> Fork(int64_t seq, const std::vector<int32_t>& path, int64_t capacity);
  void Release(int64_t seq);

  // Attention layout for one forward pass: sequence i of `seqs` gets
  // num_new[i] new tokens after its committed length and num_prior[i] tail
  // tokens of earlier calls (causal masks; the caller sets tree masks). Fails
  // if a sequence lacks reserved capacity.
  absl::StatusOr<AttentionBatch> BuildBatch(const std::vector<int64_t>& seqs,
                                            const std::vector<int>& num_new,
                                            const std::vector<int>& num_prior) const;

  Tensor* k(int64_t layer) { return &k_[layer]; }
  Tensor* v(int64_t layer) { return &v_[layer]; }
  const KvCacheOptions& options() const { return options_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used_blocks() const { return options_.num_blocks - num_free_blocks(); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct Seq {
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  PagedKvCache(KvCacheOptions options, Backend* backend) : options_(options), backend_(backend) {}
  absl::StatusOr<Seq*> Get(int64_t seq);

  KvCacheOptions options_;
  Backend* backend_;
  std::vector<Tensor> k_, v_;  // per layer [num_blocks * block_size, Hkv, Dh]
  std::vector<int32_t> free_;
  std::unordered_map<int64_t, Seq> seqs_;
  int64_t next_id_ = 1;
};

}  // namespace treespec
