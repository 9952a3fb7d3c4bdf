#include "kernels/cuda/linear.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_check.h"

namespace treespec::cuda {

// Row-major out [T, N] is column-major outᵀ [N, T] = (w as col-major [K, N])ᵀ ·
// (x as col-major [K, T]), hence op(A) = T, op(B) = N.
absl::Status Linear(cublasHandle_t handle, DType dtype, const void* x, const void* w, int64_t T,
                    int64_t K, int64_t N, void* out) {
  if (T == 0 || N == 0) return absl::OkStatus();
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (T > kMax || K > kMax || N > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("cuda linear: dims ", T, "x", K, "x", N,
                                                   " exceed cuBLAS's 32-bit limit"));
  }
  cudaDataType_t type;
  switch (dtype) {
    case DType::kF32:
      type = CUDA_R_32F;
      break;
    case DType::kF16:
      type = CUDA_R_16F;
      break;
    case DType::kBF16:
      type = CUDA_R_16BF;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cuda linear: unsupported dtype ", DTypeName(dtype)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const int n = static_cast<int>(N), t = static_cast<int>(T), k = static_cast<int>(K);
  TS_CUDA_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &alpha, w, type,
                                       k, x, type, k, &beta, out, type, n, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
