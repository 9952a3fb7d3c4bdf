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
    CpuWeights weights = CpuWeights::kF32;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device: bad device '", spec, "': ", why,
          " (expected cpu[:THREADS][:f32|f16|bf16|auto])"));
    };
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      if (p == "f32") {
        weights = CpuWeights::kF32;
      } else if (p == "f16" || p == "fp16") {
        weights = CpuWeights::kF16;
      } else if (p == "bf16") {
        weights = CpuWeights::kBF16;
      } else if (p == "auto") {
        weights = CpuWeights::kAuto;
      } else if (i != 1) {
        return bad(absl::StrCat("unknown weight type '", p, "'"));
      } else if (!absl::SimpleAtoi(p, &threads) || threads < 1 || threads > 256) {
        return bad(absl::StrCat("threads '", p, "' is not in [1, 256]"));
      }
    }
    if (parts.size() > 3) return bad("too many fields");
    return CreateCpuBackend(threads, weights);
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
      absl::StrCat("--device: unknown device '", spec,
                   "' (expected cpu[:THREADS][:f32|f16|bf16|auto] or cuda[:N][:f16|bf16])"));
}

}  // namespace treespec
