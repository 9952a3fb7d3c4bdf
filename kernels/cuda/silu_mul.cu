#include "kernels/cuda/common.cuh"
#include "kernels/cuda/silu_mul.h"

namespace treespec::cuda {
namespace {

template <typename T>
__global__ void SiluMulKernel(const T* gu, int64_t T_rows, int64_t F, T* out) {
  const int64_t n = T_rows * F;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / F, i = e % F;
    const float g = ToF(gu[t * 2 * F + i]);
    const float u = ToF(gu[t * 2 * F + F + i]);
    out[e] = FromF<T>(Silu(g) * u);
  }
}

}  // namespace

cudaError_t LaunchSiluMul(DType dtype, const void* gu, int64_t T, int64_t F, void* out,
                          cudaStream_t stream) {
  if (T * F == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using V = decltype(tag);
    SiluMulKernel<V><<<GridFor(T * F, 256), 256, 0, stream>>>(static_cast<const V*>(gu), T, F,
                                                              static_cast<V*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
