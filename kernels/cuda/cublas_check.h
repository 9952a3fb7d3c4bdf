// cuBLAS status codes as absl::Status through the one CUDA-family macro
// (core/cuda/cuda_check.h): with this header included,
//
//   TS_CUDA_RETURN_IF_ERROR(cublasGemmEx(...));
//
// works as it does for CUDA runtime calls. Allocation failures become
// RESOURCE_EXHAUSTED, invalid or unsupported arguments INVALID_ARGUMENT, the
// rest UNAVAILABLE. Thread-safe: pure functions.
#pragma once

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "core/cuda/cuda_check.h"

namespace treespec::cuda {

absl::Status ToStatus(cublasStatus_t code, const char* expr, const char* file, int line);

}  // namespace treespec::cuda
