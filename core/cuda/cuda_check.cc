#include "core/cuda/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace treespec::cuda {

absl::Status ToStatus(cudaError_t code, const char* expr, const char* file, int line) {
  if (code == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, " failed: ", cudaGetErrorName(code),
                                 " (", cudaGetErrorString(code), ")");
  if (code == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace treespec::cuda
