// Deterministic uniform fill on the device, behind Backend::FillUniform
// (host launcher). Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// out: t [n] of dtype; element i = FillUniformValue(seed, i, scale) from
// core/tensor/backend.h, bit for bit, rounded to dtype.
cudaError_t LaunchFillUniform(DType dtype, void* t, int64_t n, uint64_t seed, float scale,
                              cudaStream_t stream);

}  // namespace treespec::cuda
