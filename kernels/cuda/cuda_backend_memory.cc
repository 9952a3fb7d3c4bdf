// CudaBackend memory ops: device tensors, host transfers (with dtype
// conversion on the device), fills, synchronisation.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/fill_uniform.h"

namespace treespec::cuda {
namespace {

constexpr int64_t kUploadChunk = int64_t{8} << 20;  // elements staged per conversion

}  // namespace

absl::StatusOr<Tensor> CudaBackend::Alloc(DType dtype, Shape shape) {
  TS_ASSIGN_OR_RETURN(Tensor t, Scratch(dtype, std::move(shape)));
  TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  return t;
}

absl::Status CudaBackend::Upload(const void* src, DType src_dtype, Tensor* dst) {
  TS_RETURN_IF_ERROR(Enter("Upload"));
  if (dst->device() != DeviceKind::kCuda) return ShapeError("Upload to a host tensor", {dst});
  const int64_t n = dst->numel();
  if (n == 0) return absl::OkStatus();
  if (src_dtype == dst->dtype()) {
    TS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->raw(), src, dst->nbytes(), cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }
  if (!IsFloat(src_dtype) || !IsFloat(dst->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: cannot convert ", DTypeName(src_dtype), " to ", DTypeName(dst->dtype())));
  }
  const int64_t chunk = std::min(n, kUploadChunk);
  TS_ASSIGN_OR_RETURN(Tensor staging, Scratch(src_dtype, {chunk}));
  const size_t in_size = DTypeSize(src_dtype), out_size = DTypeSize(dst->dtype());
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t count = std::min(chunk, n - at);
    TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.raw(),
                                            static_cast<const char*>(src) + at * in_size,
                                            count * in_size, cudaMemcpyHostToDevice, stream_));
    TS_CUDA_RETURN_IF_ERROR(LaunchConvert(src_dtype, staging.raw(), dst->dtype(),
                                          static_cast<char*>(dst->raw()) + at * out_size, count,
                                          stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DownloadF32(const Tensor& src, float* dst) {
  TS_RETURN_IF_ERROR(Enter("DownloadF32"));
  if (src.device() != DeviceKind::kCuda || (!IsFloat(src.dtype()) && src.dtype() != DType::kI32)) {
    return ShapeError("DownloadF32 (needs a float or i32 cuda tensor)", {&src});
  }
  const int64_t n = src.numel();
  if (n == 0) return absl::OkStatus();
  const void* from = src.raw();
  Tensor converted;
  if (src.dtype() != DType::kF32) {
    TS_ASSIGN_OR_RETURN(converted, Scratch(DType::kF32, {n}));
    TS_CUDA_RETURN_IF_ERROR(
        LaunchConvert(src.dtype(), src.raw(), DType::kF32, converted.raw(), n, stream_));
    from = converted.raw();
  }
  TS_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, from, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Zero(Tensor* t) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  if (t->device() != DeviceKind::kCuda) return ShapeError("Zero", {t});
  TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t->raw(), 0, t->nbytes(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::FillUniform(Tensor* t, uint64_t seed, float scale) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  if (t->device() != DeviceKind::kCuda || !IsFloat(t->dtype())) {
    return ShapeError("FillUniform (needs a float cuda tensor)", {t});
  }
  TS_CUDA_RETURN_IF_ERROR(
      LaunchFillUniform(t->dtype(), t->raw(), t->numel(), seed, scale, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  TS_RETURN_IF_ERROR(Enter("Synchronize"));
  TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
