// Rotary embedding of q and k plus the paged KV-cache write (host launcher).
// Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: qkv [T, (H + 2·Hkv)·Dh] (q | k | v), positions [T] i32, inv_freq [Dh/2]
//     f32, token_slots [T] i32 (cache slot of each token);
// out: q [T, H, Dh] rotated (rotate-half convention: pairs (i, i + Dh/2),
//      angle = float(position) · inv_freq[i]);
//      k_cache, v_cache [num_slots, Hkv, Dh]: row token_slots[t] gets the
//      rotated k and the v of token t.
// qkv, q and the caches are of `dtype`.
cudaError_t LaunchQkvRope(DType dtype, const void* qkv, const int32_t* positions,
                          const float* inv_freq, const int32_t* token_slots, int64_t T, int H,
                          int Hkv, int Dh, void* q, void* k_cache, void* v_cache,
                          cudaStream_t stream);

}  // namespace treespec::cuda
