#include "core/model/llama_sequence_model.h"

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<LlamaSequenceModel>> LlamaSequenceModel::Create(
    std::unique_ptr<LlamaModel> model, int64_t kv_blocks, int64_t kv_block_size) {
  auto m = std::unique_ptr<LlamaSequenceModel>(new LlamaSequenceModel());
  TS_ASSIGN_OR_RETURN(m->cache_, PagedKvCache::Create(model->KvOptions(kv_blocks, kv_block_size),
                                                      model->backend()));
  const LlamaConfig& c = model->config();
  m->info_.kind = ModelKind::kLlama;
  m->info_.vocab_size = c.vocab_size;
  m->info_.hidden_size = c.hidden_size;
  m->info_.num_layers = c.num_layers;
  m->info_.max_positions = c.MaxExactPosition();
  m->model_ = std::move(model);
  return m;
}

absl::StatusOr<int64_t> LlamaSequenceModel::Open(int64_t capacity) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", capacity, " must be positive"));
  }
  const int64_t seq = cache_->CreateSequence();
  if (absl::Status st = cache_->Reserve(seq, capacity); !st.ok()) {
    cache_->Release(seq);
    return st;
  }
  return seq;
}

absl::Status LlamaSequenceModel::Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                                         const ForwardOptions& options) {
  return model_->Forward(seqs, cache_.get(), out, options);
}

absl::Status LlamaSequenceModel::Commit(int64_t handle, int64_t n) {
  return cache_->Commit(handle, n);
}

absl::Status LlamaSequenceModel::CommitPath(int64_t handle, const std::vector<int32_t>& path) {
  return cache_->CommitPath(handle, path);
}

absl::StatusOr<int64_t> LlamaSequenceModel::ForkPath(int64_t handle,
                                                     const std::vector<int32_t>& path,
                                                     int64_t capacity) {
  return cache_->Fork(handle, path, capacity);
}

void LlamaSequenceModel::Release(int64_t handle) { cache_->Release(handle); }

int64_t LlamaSequenceModel::length(int64_t handle) const { return cache_->length(handle); }

SequenceModelStats LlamaSequenceModel::stats() const {
  SequenceModelStats s;
  s.num_sequences = cache_->num_sequences();
  s.blocks_used = cache_->num_used_blocks();
  s.blocks_free = cache_->num_free_blocks();
  s.block_size = cache_->options().block_size;
  return s;
}

}  // namespace treespec
