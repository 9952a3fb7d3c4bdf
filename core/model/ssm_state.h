// MambaStatePool: preallocated recurrent states (conv state [C, K] and SSM
// state [C, N] per layer) in numbered slots, so that tree drafting can copy a
// parent's state into its children's slots without allocating (paper 000,
// Sec. 4.1: a state cache per batch size, allocated in advance).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/tensor/backend.h"

namespace treespec {

// A host copy of one slot's state (all layers), for snapshots and tests.
struct MambaStateSnapshot {
  std::vector<float> conv;  // [layers, C, K]
  std::vector<float> ssm;   // [layers, C, N]
};

class MambaStatePool {
 public:
  static absl::StatusOr<std::unique_ptr<MambaStatePool>> Create(const MambaConfig& config,
                                                               int64_t num_slots,
                                                               Backend* backend);

  int64_t num_slots() const { return num_slots_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Takes a free slot (zeroed state); RESOURCE_EXHAUSTED when none is left.
  absl::StatusOr<int32_t> Allocate();
  absl::Status AllocateMany(int64_t n, std::vector<int32_t>* slots);
  void Free(int32_t slot);
  absl::Status Reset(int32_t slot);
  // Copies the state of src[i] into dst[i], all layers, in order.
  absl::Status Copy(const std::vector<int32_t>& src, const std::vector<int32_t>& dst);
  absl::StatusOr<MambaStateSnapshot> Snapshot(int32_t slot);
  absl::Status Restore(int32_t slot, const MambaStateSnapshot& snapshot);

  Tensor* conv(int64_t layer) { return &conv_[layer]; }  // [S, C, K]
  Tensor* ssm(int64_t layer) { return &ssm_[layer]; }    // [S, C, N]

 private:
  MambaStatePool() = default;
  Backend* backend_ = nullptr;
  int64_t num_slots_ = 0;
  std::vector<Tensor> conv_, ssm_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

}  // namespace treespec
