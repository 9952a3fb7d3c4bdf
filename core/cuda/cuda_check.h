// Turning CUDA runtime error codes into absl::Status with the failing
// expression and file:line (llm.c's cudaCheck, but returning instead of
// exiting; STYLE.md point 9). Shared by the two CUDA add-ons, the CUDA backend
// (kernels/cuda) and the NCCL communicator (core/comm/nccl), so it sits below
// both; built only with TREESPEC_CUDA (library treespec_cuda_check).
//
//   TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n, stream));
//
// The macro calls treespec::cuda::ToStatus(code, expr, file, line); other
// libraries add an overload for their result type in their own header and
// reuse the macro (cuBLAS: kernels/cuda/cublas_check.h, NCCL:
// core/comm/nccl/nccl_check.h). Out-of-memory becomes RESOURCE_EXHAUSTED (back off),
// everything else UNAVAILABLE (the device is unusable; the caller drains).
// Thread-safe: pure functions.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace treespec::cuda {

absl::Status ToStatus(cudaError_t code, const char* expr, const char* file, int line);

}  // namespace treespec::cuda

#define TS_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                   \
    ::absl::Status ts_cuda_status_ = ::treespec::cuda::ToStatus((expr), #expr, __FILE__, \
                                                                __LINE__);               \
    if (!ts_cuda_status_.ok()) return ts_cuda_status_;                                   \
  } while (0)
