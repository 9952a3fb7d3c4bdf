// LlamaSequenceModel: a LlamaModel and its PagedKvCache as a SequenceModel.
// A handle is a KV cache sequence; Open reserves its whole capacity, so a
// live sequence never runs out of blocks later; CommitPath is the cache's KV
// compaction. Thread-compatible.
#pragma once

#include <memory>

#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "core/model/sequence_model.h"

namespace treespec {

class LlamaSequenceModel final : public SequenceModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaSequenceModel>> Create(
      std::unique_ptr<LlamaModel> model, int64_t kv_blocks, int64_t kv_block_size);

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
  SequenceModelStats stats() const override;

  LlamaModel* model() { return model_.get(); }
  PagedKvCache* cache() { return cache_.get(); }

 private:
  LlamaSequenceModel() = default;
  ModelInfo info_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
};

}  // namespace treespec
