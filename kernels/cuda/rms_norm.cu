#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rms_norm.h"

namespace treespec::cuda {
namespace {

// One block per row. Each thread reads its own elements in both passes, so
// writing out in place of x is safe.
template <typename T>
__global__ void RmsNormKernel(const T* x, const T* w, int64_t D, float eps, T* out) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * D;
  T* yr = out + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = ToF(xr[i]);
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    yr[i] = FromF<T>(ToF(w[i]) * (ToF(xr[i]) * inv));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(DType dtype, const void* x, const void* w, int64_t T, int64_t D,
                          float eps, void* out, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const int threads = D >= 2048 ? 512 : (D >= 512 ? 256 : 128);
  return DispatchFloat(dtype, [&](auto tag) {
    using T_ = decltype(tag);
    RmsNormKernel<T_><<<static_cast<unsigned>(T), threads, 0, stream>>>(
        static_cast<const T_*>(x), static_cast<const T_*>(w), D, eps, static_cast<T_*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
