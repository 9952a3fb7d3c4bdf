// SwiGLU activation on the device (host launcher). Thread-compatible:
// enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: gu [T, 2F] (gate | up); out: out [T, F] = silu(gate) · up.
cudaError_t LaunchSiluMul(DType dtype, const void* gu, int64_t T, int64_t F, void* out,
                          cudaStream_t stream);

}  // namespace treespec::cuda
