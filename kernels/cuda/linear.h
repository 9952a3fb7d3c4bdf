// Matrix product out = x · wᵀ through cuBLAS (fp16 / bf16 / fp32 storage,
// fp32 accumulation, tensor cores where the type allows). Thread-compatible:
// runs on the stream the handle is bound to.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: x [T, K], w [N, K] (row-major, as nn.Linear); out: out [T, N]. All of dtype.
absl::Status Linear(cublasHandle_t handle, DType dtype, const void* x, const void* w, int64_t T,
                    int64_t K, int64_t N, void* out);

}  // namespace treespec::cuda
