// Element-wise addition on the device (host launcher). Thread-compatible:
// enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: a, b [n]; out: out [n] = a + b (fp32 sum, rounded once). out may alias a or b.
cudaError_t LaunchAdd(DType dtype, const void* a, const void* b, int64_t n, void* out,
                      cudaStream_t stream);

// in: b [N]; inout: x [T, N] += b per row (fp32 sum, rounded once).
cudaError_t LaunchAddBias(DType dtype, void* x, const void* b, int64_t T, int64_t N,
                          cudaStream_t stream);

}  // namespace treespec::cuda
