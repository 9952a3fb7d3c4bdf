#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rms_norm.h"

namespace treespec::cuda {
namespace {

// One block per row. Each thread reads its own elements in both passes, so
// writing out in place of x is safe.
template <typename T>
__device__ void RmsNormRow(const T* xr, const T* w, int64_t D, float eps, T* yr) {
  __shared__ float scratch[32];
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

template <typename T>
__global__ void RmsNormKernel(const T* x, const T* w, int64_t D, float eps, T* out) {
  RmsNormRow(x + blockIdx.x * D, w, D, eps, out + blockIdx.x * D);
}

// One block per (token, head) (grid x = tokens, y = heads): the same arithmetic as RmsNormKernel on a row
// of Dh elements at x + token·W + (h0 + head)·Dh.
template <typename T>
__global__ void HeadRmsNormKernel(T* x, const T* w, int64_t W, int64_t Dh, int64_t h0,
                                  float eps) {
  T* row = x + blockIdx.x * W + (h0 + blockIdx.y) * Dh;
  RmsNormRow<T>(row, w, Dh, eps, row);
}

}  // namespace

cudaError_t LaunchHeadRmsNorm(DType dtype, void* x, const void* w, int64_t T, int64_t W,
                              int64_t Dh, int64_t h0, int64_t n, float eps, cudaStream_t stream) {
  if (T == 0 || n == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T_ = decltype(tag);
    HeadRmsNormKernel<T_><<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(n)), 128, 0,
                            stream>>>(static_cast<T_*>(x), static_cast<const T_*>(w), W, Dh, h0,
                                      eps);
    return cudaGetLastError();
  });
}

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
