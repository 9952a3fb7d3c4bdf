#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"

namespace treespec::cuda {
namespace {

template <typename S, typename D>
__global__ void ConvertKernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<S, int32_t>) {
      dst[i] = static_cast<float>(src[i]);
    } else {
      dst[i] = FromF<D>(ToF(src[i]));
    }
  }
}

template <typename S, typename D>
cudaError_t Run(const void* src, void* dst, int64_t n, cudaStream_t stream) {
  ConvertKernel<S, D><<<GridFor(n, 256), 256, 0, stream>>>(static_cast<const S*>(src),
                                                           static_cast<D*>(dst), n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchConvert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (src_dtype == dst_dtype) {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * DTypeSize(src_dtype),
                           cudaMemcpyDeviceToDevice, stream);
  }
  if (src_dtype == DType::kI32) {
    if (dst_dtype != DType::kF32) return cudaErrorInvalidValue;
    return Run<int32_t, float>(src, dst, n, stream);
  }
  return DispatchFloat(src_dtype, [&](auto s) {
    using S = decltype(s);
    return DispatchFloat(dst_dtype, [&](auto d) {
      using D = decltype(d);
      return Run<S, D>(src, dst, n, stream);
    });
  });
}

}  // namespace treespec::cuda
