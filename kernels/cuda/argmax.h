// Row-wise argmax on the device (host launcher). Thread-compatible: enqueues
// on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: logits [R, V] of dtype; out: ids [R] i32 on the device, the lowest
// index among each row's maxima.
cudaError_t LaunchArgmaxRows(DType dtype, const void* logits, int64_t R, int64_t V, int32_t* ids,
                             cudaStream_t stream);

}  // namespace treespec::cuda
