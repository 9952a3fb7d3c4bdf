// Rotary embedding of q and k plus the paged KV-cache write (host launcher).
// Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: qkv [T, (H + 2·Hkv)·Dh] (q | k | v), positions [T] i32, inv_freq
//     [rot_half] f32 (2·rot_half <= Dh), token_slots [T] i32 (cache slot of
//     each token);
// out: q [T, H, Dh] rotated (rotate-half convention on the first 2·rot_half
//      columns of each head: pairs (i, i + rot_half), angle =
//      float(position) · inv_freq[i]; the other columns copied: partial
//      rotary, rot_half = Dh / 2 for full);
//      k_cache, v_cache [num_slots, Hkv, Dh]: row token_slots[t] gets the
//      rotated k and the v of token t.
// qkv, q and the caches are of `dtype`.
cudaError_t LaunchQkvRope(DType dtype, const void* qkv, const int32_t* positions,
                          const float* inv_freq, int rot_half, const int32_t* token_slots,
                          int64_t T, int H, int Hkv, int Dh, void* q, void* k_cache, void* v_cache,
                          cudaStream_t stream);

}  // namespace treespec::cuda
