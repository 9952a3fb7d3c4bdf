// RMSNorm on the device (host launcher). Thread-compatible: enqueues on the
// caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: x [T, D], w [D]; out: out [T, D] = w · (x / sqrt(mean(x²) + eps)), all
// of `dtype`, fp32 arithmetic. out may alias x.
cudaError_t LaunchRmsNorm(DType dtype, const void* x, const void* w, int64_t T, int64_t D,
                          float eps, void* out, cudaStream_t stream);

// inout: x [T, D] += r [T, D]; out: out [T, D] = RmsNorm(x after the add, w),
// the values of LaunchAdd then LaunchRmsNorm, in one pass where the rows fit
// the vector kernel. out may alias r, not x.
cudaError_t LaunchAddRmsNorm(DType dtype, void* x, const void* r, const void* w, int64_t T,
                             int64_t D, float eps, void* out, cudaStream_t stream);

// inout: x [T, W]; heads [h0, h0 + n) of Dh columns in every row become
// w [Dh] · head / sqrt(mean(head²) + eps), fp32 arithmetic.
cudaError_t LaunchHeadRmsNorm(DType dtype, void* x, const void* w, int64_t T, int64_t W,
                              int64_t Dh, int64_t h0, int64_t n, float eps, cudaStream_t stream);

}  // namespace treespec::cuda
