#include "core/model/ssm_state.h"

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<MambaStatePool>> MambaStatePool::Create(
    const MambaConfig& config, int64_t num_slots, Backend* backend) {
  if (num_slots <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("state pool: num_slots ", num_slots,
                                                   " must be positive"));
  }
  auto pool = std::unique_ptr<MambaStatePool>(new MambaStatePool());
  pool->backend_ = backend;
  pool->num_slots_ = num_slots;
  const int64_t C = config.intermediate_size;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    TS_ASSIGN_OR_RETURN(Tensor c, backend->Alloc(backend->activation_dtype(),
                                                 {num_slots, C, config.conv_kernel}));
    TS_ASSIGN_OR_RETURN(Tensor s, backend->Alloc(DType::kF32, {num_slots, C, config.state_size}));
    pool->conv_.push_back(std::move(c));
    pool->ssm_.push_back(std::move(s));
  }
  for (int64_t i = num_slots - 1; i >= 0; --i) pool->free_.push_back(static_cast<int32_t>(i));
  pool->in_use_.assign(num_slots, false);
  return pool;
}

absl::StatusOr<int32_t> MambaStatePool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("state pool full: all ", num_slots_, " slots in use"));
  }
  int32_t slot = free_.back();
  free_.pop_back();
  in_use_[slot] = true;
  TS_RETURN_IF_ERROR(Reset(slot));
  return slot;
}

absl::Status MambaStatePool::AllocateMany(int64_t n, std::vector<int32_t>* slots) {
  if (n > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("state pool full: need ", n, " slots, ",
                                                     free_.size(), " of ", num_slots_, " free"));
  }
  for (int64_t i = 0; i < n; ++i) {
    TS_ASSIGN_OR_RETURN(int32_t s, Allocate());
    slots->push_back(s);
  }
  return absl::OkStatus();
}

void MambaStatePool::Free(int32_t slot) {
  if (slot < 0 || slot >= num_slots_ || !in_use_[slot]) return;
  in_use_[slot] = false;
  free_.push_back(slot);
}

absl::Status MambaStatePool::Reset(int32_t slot) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    Tensor c = conv_[l].Rows(slot, slot + 1);
    Tensor s = ssm_[l].Rows(slot, slot + 1);
    TS_RETURN_IF_ERROR(backend_->Zero(&c));
    TS_RETURN_IF_ERROR(backend_->Zero(&s));
  }
  return absl::OkStatus();
}

absl::Status MambaStatePool::Copy(const std::vector<int32_t>& src,
                                  const std::vector<int32_t>& dst) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    TS_RETURN_IF_ERROR(backend_->CopyRows(&conv_[l], src, dst));
    TS_RETURN_IF_ERROR(backend_->CopyRows(&ssm_[l], src, dst));
  }
  return absl::OkStatus();
}

absl::StatusOr<MambaStateSnapshot> MambaStatePool::Snapshot(int32_t slot) {
  MambaStateSnapshot snap;
  for (size_t l = 0; l < conv_.size(); ++l) {
    Tensor c = conv_[l].Rows(slot, slot + 1);
    Tensor s = ssm_[l].Rows(slot, slot + 1);
    size_t co = snap.conv.size(), so = snap.ssm.size();
    snap.conv.resize(co + c.numel());
    snap.ssm.resize(so + s.numel());
    TS_RETURN_IF_ERROR(backend_->DownloadF32(c, snap.conv.data() + co));
    TS_RETURN_IF_ERROR(backend_->DownloadF32(s, snap.ssm.data() + so));
  }
  return snap;
}

absl::Status MambaStatePool::Restore(int32_t slot, const MambaStateSnapshot& snap) {
  size_t co = 0, so = 0;
  for (size_t l = 0; l < conv_.size(); ++l) {
    Tensor c = conv_[l].Rows(slot, slot + 1);
    Tensor s = ssm_[l].Rows(slot, slot + 1);
    if (co + c.numel() > snap.conv.size() || so + s.numel() > snap.ssm.size()) {
      return absl::InvalidArgumentError("state snapshot does not match the pool's shape");
    }
    TS_RETURN_IF_ERROR(backend_->Upload(snap.conv.data() + co, DType::kF32, &c));
    TS_RETURN_IF_ERROR(backend_->Upload(snap.ssm.data() + so, DType::kF32, &s));
    co += c.numel();
    so += s.numel();
  }
  return absl::OkStatus();
}

}  // namespace treespec
