// NCCL result codes as absl::Status with the failing expression and
// file:line, through the one CUDA-family macro (core/cuda/cuda_check.h,
// STYLE.md point 9): this overload of treespec::cuda::ToStatus lets
//
//   TS_CUDA_RETURN_IF_ERROR(ncclAllReduce(...));
//
// work like it does for CUDA runtime and cuBLAS calls. ncclInProgress (a
// non-blocking communicator still working) is NOT an error for callers that
// poll; they test for it before using the macro. Remote and system errors
// become UNAVAILABLE (a peer or the network is gone), invalid arguments
// INVALID_ARGUMENT, the rest INTERNAL. Thread-safe: pure functions.
#pragma once

#include <nccl.h>

#include "absl/status/status.h"
#include "core/cuda/cuda_check.h"

namespace treespec::cuda {

absl::Status ToStatus(ncclResult_t code, const char* expr, const char* file, int line);

}  // namespace treespec::cuda
