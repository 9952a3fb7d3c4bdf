// Turning CUDA runtime and cuBLAS error codes into absl::Status with the
// failing expression and file:line (llm.c's cudaCheck, but returning instead
// of exiting; STYLE.md point 9).
//
//   TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n, stream));
//   TS_CUDA_RETURN_IF_ERROR(cublasGemmEx(...));
//
// The macro calls treespec::cuda::ToStatus(code, expr, file, line); other
// libraries (NCCL) add an overload for their result type in their own header
// and reuse the macro. Out-of-memory becomes RESOURCE_EXHAUSTED (back off),
// everything else UNAVAILABLE (the device is unusable; the caller drains).
// Thread-safe: pure functions.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace treespec::cuda {

absl::Status ToStatus(cudaError_t code, const char* expr, const char* file, int line);
absl::Status ToStatus(cublasStatus_t code, const char* expr, const char* file, int line);

}  // namespace treespec::cuda

#define TS_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                   \
    ::absl::Status ts_cuda_status_ = ::treespec::cuda::ToStatus((expr), #expr, __FILE__, \
                                                                __LINE__);               \
    if (!ts_cuda_status_.ok()) return ts_cuda_status_;                                   \
  } while (0)
