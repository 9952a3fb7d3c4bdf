// Device helpers shared by the .cu files of kernels/cuda: storage-type
// conversions (fp32 / fp16 / bf16, fp32 arithmetic everywhere), warp
// reductions and the dtype dispatch used by the host launchers. Included by
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromF<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x (a multiple of 32, at most 1024) threads;
// every thread gets the total. `scratch` holds 32 floats.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

// Blocks of `threads` covering `n` elements, capped (kernels use grid-stride loops).
inline unsigned GridFor(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<unsigned>(blocks);
}

// Largest of 16, 8, 4, 2, 1 dividing every value (addresses, byte strides):
// the widest access a byte-copy kernel may use.
inline int CopyWidth(std::initializer_list<uint64_t> values) {
  uint64_t acc = 16;
  for (uint64_t v : values) acc |= v;
  return static_cast<int>(acc & (~acc + 1));
}

// Copies `bytes` (a multiple of sizeof(V)) from src to dst with all threads
// of the block.
template <typename V>
__device__ __forceinline__ void CopyBytes(const void* src, void* dst, int64_t bytes) {
  const V* s = static_cast<const V*>(src);
  V* d = static_cast<V*>(dst);
  for (int64_t i = threadIdx.x; i < bytes / static_cast<int64_t>(sizeof(V)); i += blockDim.x) {
    d[i] = s[i];
  }
}

// Calls f(V{}) with V an unsigned type of `width` bytes (16, 8, 4, 2 or 1).
template <typename F>
cudaError_t DispatchWidth(int width, F&& f) {
  switch (width) {
    case 16:
      return f(uint4{});
    case 8:
      return f(uint2{});
    case 4:
      return f(uint32_t{});
    case 2:
      return f(uint16_t{});
    default:
      return f(uint8_t{});
  }
}

// Calls f(T{}) with T the storage type of `dtype` (f32, f16 or bf16).
template <typename F>
cudaError_t DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF16:
      return f(__half{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace treespec::cuda
