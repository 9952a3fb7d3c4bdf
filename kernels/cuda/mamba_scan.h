// Mamba's selective scan on the device (Gu & Dao 2023, Alg. 2), for one
// sequence and for one step of a batch of pooled states (host launchers):
//   dt = softplus(delta + dt_bias), h = exp(dt·A)·h + dt·B·u,
//   y = (C·h + D·u) · silu(z).
// SSM states are fp32; u, delta, z, Bm, Cm and y are of `dtype`; dt_bias, A
// and D are fp32. Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: u, delta, z [L, C], dt_bias [C], A [C, N], Bm, Cm [L, N], D [C];
// inout: state [C, N] f32; out: y [L, C]. N <= 32.
cudaError_t LaunchMambaScan(DType dtype, const void* u, const void* delta, const float* dt_bias,
                            const float* A, const void* Bm, const void* Cm, const float* D,
                            const void* z, int64_t L, int64_t C, int N, float* state, void* y,
                            cudaStream_t stream);

// in: u, delta, z [B, C], dt_bias [C], A [C, N], Bm, Cm [B, N], D [C],
//     slots [B] i32; inout: states [S, C, N] f32; out: y [B, C].
cudaError_t LaunchMambaScanBatch(DType dtype, const void* u, const void* delta,
                                 const float* dt_bias, const float* A, const void* Bm,
                                 const void* Cm, const float* D, const void* z, int64_t B,
                                 int64_t C, int N, const int32_t* slots, float* states, void* y,
                                 cudaStream_t stream);

}  // namespace treespec::cuda
