// TargetOps: every change a TargetRunner makes to the target model's state —
// KV cache sequence operations and forward passes — behind one interface, so
// that a tensor-parallel group can mirror them: LocalTargetOps applies them to
// this process's model and cache; GroupLeader (worker/rank_loop.h) also logs
// them and broadcasts the log to the other ranks before each forward pass.
//
// Thread-compatible: one caller at a time (the TargetRunner's lock).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/model/forward_batch.h"
#include "core/model/kv_cache.h"
#include "core/model/llama.h"

namespace treespec {

class TargetOps {
 public:
  virtual ~TargetOps() = default;
  // The PagedKvCache operations of the same names.
  virtual int64_t CreateSequence() = 0;
  virtual absl::Status Reserve(int64_t kv, int64_t total_len) = 0;
  virtual absl::Status Commit(int64_t kv, int64_t n) = 0;
  virtual absl::Status CommitPath(int64_t kv, const std::vector<int32_t>& path) = 0;
  virtual void Release(int64_t kv) = 0;
  // LlamaModel::Forward against the cache.
  // in: seqs; out: out (logits of the rows each sequence asked for).
  virtual absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out) = 0;
};

// Applies every operation to `model` and `cache` (not owned) directly.
class LocalTargetOps final : public TargetOps {
 public:
  LocalTargetOps(LlamaModel* model, PagedKvCache* cache) : model_(model), cache_(cache) {}
  int64_t CreateSequence() override { return cache_->CreateSequence(); }
  absl::Status Reserve(int64_t kv, int64_t total_len) override {
    return cache_->Reserve(kv, total_len);
  }
  absl::Status Commit(int64_t kv, int64_t n) override { return cache_->Commit(kv, n); }
  absl::Status CommitPath(int64_t kv, const std::vector<int32_t>& path) override {
    return cache_->CommitPath(kv, path);
  }
  void Release(int64_t kv) override { cache_->Release(kv); }
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out) override {
    return model_->Forward(seqs, cache_, out);
  }

 private:
  LlamaModel* const model_;
  PagedKvCache* const cache_;
};

}  // namespace treespec
