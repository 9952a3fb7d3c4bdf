// Mamba's depthwise causal conv1d + SiLU on the device, for one sequence and
// for one step of a batch of pooled states (host launchers). Layout as Hugging
// Face's MambaMixer: state [C, K] holds the last K conv inputs, oldest first.
// Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

constexpr int kMaxConvKernel = 8;

// in: x [L, C], w [C, K], b [C]; inout: state [C, K]; out: out [L, C] =
// silu(conv(x) + b). All of `dtype`; K <= kMaxConvKernel.
cudaError_t LaunchMambaConv(DType dtype, const void* x, int64_t L, int64_t C, const void* w,
                            const void* b, int K, void* state, void* out, cudaStream_t stream);

// in: x [B, C], w [C, K], b [C], slots [B] i32; inout: states [S, C, K];
// out: out [B, C]. Token i advances state slots[i].
cudaError_t LaunchMambaConvBatch(DType dtype, const void* x, int64_t B, int64_t C, const void* w,
                                 const void* b, int K, const int32_t* slots, void* states,
                                 void* out, cudaStream_t stream);

}  // namespace treespec::cuda
