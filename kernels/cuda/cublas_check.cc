#include "kernels/cuda/cublas_check.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace treespec::cuda {

absl::Status ToStatus(cublasStatus_t code, const char* expr, const char* file, int line) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                 cublasGetStatusName(code), " (", cublasGetStatusString(code),
                                 ")");
  if (code == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (code == CUBLAS_STATUS_INVALID_VALUE || code == CUBLAS_STATUS_NOT_SUPPORTED) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::UnavailableError(msg);
}

}  // namespace treespec::cuda
