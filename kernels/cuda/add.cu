#include "kernels/cuda/add.h"
#include "kernels/cuda/common.cuh"

namespace treespec::cuda {
namespace {

template <typename T>
__global__ void AddKernel(const T* a, const T* b, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromF<T>(ToF(a[i]) + ToF(b[i]));
  }
}

template <typename T>
__global__ void AddBiasKernel(T* x, const T* b, int64_t n, int64_t N) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = FromF<T>(ToF(x[i]) + ToF(b[i % N]));
  }
}

}  // namespace

cudaError_t LaunchAddBias(DType dtype, void* x, const void* b, int64_t T, int64_t N,
                          cudaStream_t stream) {
  const int64_t n = T * N;
  if (n == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T_ = decltype(tag);
    AddBiasKernel<T_><<<GridFor(n, 256), 256, 0, stream>>>(static_cast<T_*>(x),
                                                          static_cast<const T_*>(b), n, N);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAdd(DType dtype, const void* a, const void* b, int64_t n, void* out,
                      cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T><<<GridFor(n, 256), 256, 0, stream>>>(static_cast<const T*>(a),
                                                      static_cast<const T*>(b), n,
                                                      static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
