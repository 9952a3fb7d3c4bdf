// CudaBackend sampling: argmax and the temperature / top-k / top-p transform
// of logits rows.
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/process_logits.h"

namespace treespec::cuda {

absl::Status CudaBackend::ArgmaxRows(const Tensor& logits, std::vector<int32_t>* ids) {
  TS_RETURN_IF_ERROR(Enter("ArgmaxRows"));
  if (logits.device() != DeviceKind::kCuda || !IsFloat(logits.dtype()) || logits.rank() != 2) {
    return ShapeError("ArgmaxRows", {&logits});
  }
  const int64_t R = logits.dim(0), V = logits.dim(1);
  ids->resize(R);
  if (R == 0) return absl::OkStatus();
  TS_ASSIGN_OR_RETURN(Tensor out, Scratch(DType::kI32, {R}));
  TS_CUDA_RETURN_IF_ERROR(
      LaunchArgmaxRows(logits.dtype(), logits.raw(), R, V, out.data<int32_t>(), stream_));
  TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids->data(), out.raw(), R * sizeof(int32_t),
                                          cudaMemcpyDeviceToHost, stream_));
  TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ProcessLogitsRows(const Tensor& logits, float temperature, int top_k,
                                            float top_p, Tensor* probs) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(*probs, DType::kF32, "probs"));
  if (logits.device() != DeviceKind::kCuda || !IsFloat(logits.dtype()) || logits.rank() != 2 ||
      probs->numel() != logits.numel()) {
    return ShapeError("ProcessLogitsRows", {&logits, probs});
  }
  if (!(temperature > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProcessLogitsRows: temperature ", temperature, " must be > 0"));
  }
  const int64_t R = logits.dim(0), V = logits.dim(1);
  if (R * V > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("ProcessLogitsRows: more than 2^31 logits");
  }
  const size_t ws_bytes = ProcessLogitsWorkspaceBytes(R, V);
  TS_ASSIGN_OR_RETURN(Tensor ws, Scratch(DType::kU8, {static_cast<int64_t>(ws_bytes)}));
  TS_CUDA_RETURN_IF_ERROR(LaunchProcessLogits(logits.dtype(), logits.raw(), R, V, temperature,
                                              top_k, top_p, probs->data<float>(), ws.raw(),
                                              ws_bytes, stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
