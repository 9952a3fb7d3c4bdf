#include "core/model/mamba2_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<Mamba2StatePool>> Mamba2StatePool::Create(
    const Mamba2StateDims& dims, int64_t num_slots, int64_t cache_rows, Backend* backend) {
  if (num_slots <= 0 || cache_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mamba2 state pool: ", num_slots, " slots and ",
                                                   cache_rows, " cache rows"));
  }
  auto pool = std::unique_ptr<Mamba2StatePool>(new Mamba2StatePool());
  pool->backend_ = backend;
  pool->dims_ = dims;
  pool->num_slots_ = num_slots;
  const Mamba2StateDims& d = dims;
  for (int64_t l = 0; l < d.num_layers; ++l) {
    TS_ASSIGN_OR_RETURN(Tensor c, backend->Alloc(backend->activation_dtype(),
                                                 {num_slots, d.conv_dim, d.conv_kernel}));
    TS_ASSIGN_OR_RETURN(Tensor s,
                        backend->Alloc(DType::kF32, {num_slots, d.heads, d.head_dim, d.state}));
    TS_ASSIGN_OR_RETURN(Tensor a, backend->Alloc(backend->activation_dtype(),
                                                 {std::max<int64_t>(cache_rows, 1),
                                                  d.conv_dim + d.heads}));
    pool->conv_.push_back(std::move(c));
    pool->ssm_.push_back(std::move(s));
    pool->cache_.push_back(std::move(a));
  }
  for (int64_t i = num_slots - 1; i >= 0; --i) pool->free_.push_back(static_cast<int32_t>(i));
  pool->in_use_.assign(num_slots, false);
  return pool;
}

absl::StatusOr<int32_t> Mamba2StatePool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mamba2 state pool full: all ", num_slots_, " slots in use"));
  }
  const int32_t slot = free_.back();
  for (size_t l = 0; l < conv_.size(); ++l) {
    Tensor c = conv_[l].Rows(slot, slot + 1);
    Tensor s = ssm_[l].Rows(slot, slot + 1);
    TS_RETURN_IF_ERROR(backend_->Zero(&c));
    TS_RETURN_IF_ERROR(backend_->Zero(&s));
  }
  free_.pop_back();
  in_use_[slot] = true;
  return slot;
}

void Mamba2StatePool::Free(int32_t slot) {
  if (slot < 0 || slot >= num_slots_ || !in_use_[slot]) return;
  in_use_[slot] = false;
  free_.push_back(slot);
}

absl::Status Mamba2StatePool::Copy(int32_t src, int32_t dst) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    TS_RETURN_IF_ERROR(backend_->CopyRows(&conv_[l], {src}, {dst}));
    TS_RETURN_IF_ERROR(backend_->CopyRows(&ssm_[l], {src}, {dst}));
  }
  return absl::OkStatus();
}

int64_t Mamba2StatePool::snapshot_size() const {
  const Mamba2StateDims& d = dims_;
  return d.num_layers * (d.conv_dim * d.conv_kernel + d.heads * d.head_dim * d.state);
}

absl::StatusOr<std::vector<float>> Mamba2StatePool::Snapshot(int32_t slot) {
  std::vector<float> out(snapshot_size());
  size_t at = 0;
  for (std::vector<Tensor>* part : {&conv_, &ssm_}) {
    for (Tensor& t : *part) {
      Tensor row = t.Rows(slot, slot + 1);
      TS_RETURN_IF_ERROR(backend_->DownloadF32(row, out.data() + at));
      at += row.numel();
    }
  }
  return out;
}

absl::Status Mamba2StatePool::Restore(int32_t slot, const std::vector<float>& data) {
  if (static_cast<int64_t>(data.size()) != snapshot_size()) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot of ", data.size(),
                                                   " values; this model's state has ",
                                                   snapshot_size()));
  }
  size_t at = 0;
  for (std::vector<Tensor>* part : {&conv_, &ssm_}) {
    for (Tensor& t : *part) {
      Tensor row = t.Rows(slot, slot + 1);
      TS_RETURN_IF_ERROR(backend_->Upload(data.data() + at, DType::kF32, &row));
      at += row.numel();
    }
  }
  return absl::OkStatus();
}

}  // namespace treespec
