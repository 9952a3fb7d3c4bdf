// Mamba2StatePool: what a hybrid model keeps per sequence for its Mamba-2
// layers (this rank's share of the heads and channels):
//  - recurrent states in numbered slots: per layer a conv state [Cd, K] (the
//    last K conv inputs, oldest first) and an SSM state [H, P, N] (f32);
//  - the activation cache of activation replay (paper 001 Alg. 1): per layer
//    and cache row, the in_proj columns that the conv and the scan read for
//    one token (its conv input xBC and raw dt, Cd + H values). Every token of
//    a tail keeps its row, so the state after any accepted node is recomputed
//    from the committed state and these rows, without a second forward pass.
// Slots are handed out zeroed and come back with Free; cache rows are owned
// by whoever the caller gives them to. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/backend.h"

namespace treespec {

struct Mamba2StateDims {
  int64_t num_layers = 0;  // Mamba-2 layers
  int64_t conv_dim = 0;    // Cd (this rank's x | B | C channels)
  int64_t conv_kernel = 0;
  int64_t heads = 0;  // H (this rank's)
  int64_t head_dim = 0;
  int64_t state = 0;
};

class Mamba2StatePool {
 public:
  static absl::StatusOr<std::unique_ptr<Mamba2StatePool>> Create(const Mamba2StateDims& dims,
                                                                int64_t num_slots,
                                                                int64_t cache_rows,
                                                                Backend* backend);

  const Mamba2StateDims& dims() const { return dims_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // A free slot with zero state; RESOURCE_EXHAUSTED when none is left.
  absl::StatusOr<int32_t> Allocate();
  void Free(int32_t slot);
  // Copies the state of slot src into slot dst, every layer.
  absl::Status Copy(int32_t src, int32_t dst);
  // Host copy of a slot, every layer: conv states then SSM states.
  absl::StatusOr<std::vector<float>> Snapshot(int32_t slot);
  absl::Status Restore(int32_t slot, const std::vector<float>& data);
  int64_t snapshot_size() const;

  Tensor* conv(int64_t layer) { return &conv_[layer]; }  // [S, Cd, K]
  Tensor* ssm(int64_t layer) { return &ssm_[layer]; }    // [S, H, P, N] f32
  Tensor* cache(int64_t layer) { return &cache_[layer]; }  // [cache rows, Cd + H]

 private:
  Mamba2StatePool() = default;
  Backend* backend_ = nullptr;
  Mamba2StateDims dims_;
  int64_t num_slots_ = 0;
  std::vector<Tensor> conv_, ssm_, cache_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

}  // namespace treespec
