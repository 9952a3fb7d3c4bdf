#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mamba_conv.h"

namespace treespec::cuda {
namespace {

// One thread per (sequence, channel): the K-wide window lives in registers
// (fully unrolled over kMaxConvKernel so it is never indexed at run time) and
// walks the L tokens in order; the state is written back once at the end.
// The window holds exact copies of storage-type inputs, so keeping it in
// fp32 changes nothing.
template <typename T>
__device__ __forceinline__ void ConvChannel(const T* x, int64_t x_stride, int64_t L, int64_t c,
                                            const T* w, const T* b, int K, T* state, T* out,
                                            int64_t out_stride) {
  float win[kMaxConvKernel], wc[kMaxConvKernel];
#pragma unroll
  for (int k = 0; k < kMaxConvKernel; ++k) {
    win[k] = k < K ? ToF(state[c * K + k]) : 0.0f;
    wc[k] = k < K ? ToF(w[c * K + k]) : 0.0f;
  }
  const float bias = ToF(b[c]);
  for (int64_t t = 0; t < L; ++t) {
#pragma unroll
    for (int k = 0; k + 1 < kMaxConvKernel; ++k) {
      if (k + 1 < K) win[k] = win[k + 1];
    }
    const float xv = ToF(x[t * x_stride + c]);
#pragma unroll
    for (int k = 0; k < kMaxConvKernel; ++k) {
      if (k == K - 1) win[k] = xv;
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxConvKernel; ++k) {
      if (k < K) acc += win[k] * wc[k];
    }
    acc += bias;
    out[t * out_stride + c] = FromF<T>(Silu(acc));
  }
#pragma unroll
  for (int k = 0; k < kMaxConvKernel; ++k) {
    if (k < K) state[c * K + k] = FromF<T>(win[k]);
  }
}

template <typename T>
__global__ void MambaConvKernel(const T* x, int64_t L, int64_t C, const T* w, const T* b, int K,
                                T* state, T* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  ConvChannel(x, C, L, c, w, b, K, state, out, C);
}

template <typename T>
__global__ void MambaConvBatchKernel(const T* x, int64_t C, const T* w, const T* b, int K,
                                     const int32_t* slots, T* states, T* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = blockIdx.y;
  if (c >= C) return;
  T* state = states + static_cast<int64_t>(slots[i]) * C * K;
  ConvChannel(x + i * C, C, 1, c, w, b, K, state, out + i * C, C);
}

}  // namespace

cudaError_t LaunchMambaConv(DType dtype, const void* x, int64_t L, int64_t C, const void* w,
                            const void* b, int K, void* state, void* out, cudaStream_t stream) {
  if (K < 1 || K > kMaxConvKernel) return cudaErrorInvalidValue;
  if (C == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MambaConvKernel<T><<<static_cast<unsigned>((C + 127) / 128), 128, 0, stream>>>(
        static_cast<const T*>(x), L, C, static_cast<const T*>(w), static_cast<const T*>(b), K,
        static_cast<T*>(state), static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t LaunchMambaConvBatch(DType dtype, const void* x, int64_t B, int64_t C, const void* w,
                                 const void* b, int K, const int32_t* slots, void* states,
                                 void* out, cudaStream_t stream) {
  if (K < 1 || K > kMaxConvKernel) return cudaErrorInvalidValue;
  if (B == 0 || C == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MambaConvBatchKernel<T>
        <<<dim3(static_cast<unsigned>((C + 127) / 128), static_cast<unsigned>(B)), 128, 0,
           stream>>>(static_cast<const T*>(x), C, static_cast<const T*>(w),
                     static_cast<const T*>(b), K, slots, static_cast<T*>(states),
                     static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
