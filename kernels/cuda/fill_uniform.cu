#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fill_uniform.h"

namespace treespec::cuda {
namespace {

// Same as FillUniformMix / FillUniformValue in core/tensor/backend.h (which
// this file cannot include: no absl in .cu files). Every step is exact except
// the final multiplication, so host and device agree bit for bit.
__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

template <typename T>
__global__ void FillUniformKernel(T* t, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = Mix(seed + static_cast<uint64_t>(i));
    const float u = __fmul_rn(__fdiv_rn(static_cast<float>(r >> 40), 16777216.0f), 2.0f);
    t[i] = FromF<T>(__fmul_rn(__fsub_rn(u, 1.0f), scale));
  }
}

}  // namespace

cudaError_t LaunchFillUniform(DType dtype, void* t, int64_t n, uint64_t seed, float scale,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    FillUniformKernel<T><<<GridFor(n, 256), 256, 0, stream>>>(static_cast<T*>(t), n, seed, scale);
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
