// CudaAttentionPlan: the device form of an AttentionBatch, built once per
// forward pass by CudaBackend::PlanAttention and shared by every layer.
//
// One upload holds mask_words (u64) | query_start | context_lens | prior_lens |
// block_tables | mask_offset | token_slots (i32); the work split of the
// attention kernel (attention.h) is computed and uploaded by the first layer
// that asks for a head layout and reused by the others.
// Thread-compatible: used by the one thread that drives its backend.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/tensor/backend.h"
#include "kernels/cuda/attention.h"

namespace treespec::cuda {

class CudaAttentionPlan final : public AttentionPlan {
 public:
  struct Work {
    int group = -1, num_kv_heads = -1;
    AttentionWork work;
    Tensor device;  // items | groups
    const AttentionItem* items = nullptr;
    const AttentionGroup* groups = nullptr;
  };

  // Validates `batch` (block tables cover every position it touches, masks
  // fit) and uploads it through `backend` (INVALID_ARGUMENT on a bad batch).
  static absl::StatusOr<std::unique_ptr<CudaAttentionPlan>> Create(const AttentionBatch& batch,
                                                                   Backend* backend);

  // The work split for H / Hkv = group, computed on first use.
  absl::StatusOr<const Work*> WorkFor(int group, int num_kv_heads, int num_sms,
                                      Backend* backend) const;

  // Device arrays (views into one allocation).
  const uint64_t* mask_words = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* prior_lens = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* mask_offset = nullptr;
  const int32_t* token_slots = nullptr;  // [T] cache slot of each new token
  int64_t max_slot = -1;                 // largest slot any position maps to

 private:
  explicit CudaAttentionPlan(const AttentionBatch& batch) : AttentionPlan(batch) {}

  Tensor meta_;
  mutable Work work_;
};

}  // namespace treespec::cuda
