// Chooses a backend implementation from a device string at start-up.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/tensor/backend.h"

namespace treespec {

#ifndef TREESPEC_HAVE_CUDA
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int, DType) {
  return absl::UnavailableError("treespec was built without CUDA (TREESPEC_CUDA=OFF)");
}
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts[0] == "cpu") {
    int threads = 1;
    if (parts.size() > 2 || (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &threads) ||
                                                    threads < 1 || threads > 256))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device: bad device '", spec, "' (expected cpu or cpu:THREADS)"));
    }
    return CreateCpuBackend(threads);
  }
  if (parts[0] == "cuda") {
    int index = 0;
    DType dtype = DType::kF16;
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i] == "bf16") {
        dtype = DType::kBF16;
      } else if (parts[i] == "f16" || parts[i] == "fp16") {
        dtype = DType::kF16;
      } else if (!absl::SimpleAtoi(parts[i], &index) || index < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--device: bad device '", spec, "'"));
      }
    }
    return CreateCudaBackend(index, dtype);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device: unknown device '", spec, "' (expected cpu, cuda, cuda:N[:bf16])"));
}

}  // namespace treespec
