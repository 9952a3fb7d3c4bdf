#include <cfloat>

#include "kernels/cuda/argmax.h"
#include "kernels/cuda/common.cuh"

namespace treespec::cuda {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ bool Better(float v, int64_t i, float bv, int64_t bi) {
  return v > bv || (v == bv && i < bi);
}

// One block per row. Each thread scans its elements in increasing index order
// (keeping the first of equal maxima), then the block reduces with ties going
// to the lower index. With `kVec` > 1 every load is 16 bytes.
template <typename T, int kVec>
__global__ void ArgmaxKernel(const T* logits, int64_t V, int32_t* ids) {
  __shared__ float best_v[kThreads / 32];
  __shared__ int64_t best_i[kThreads / 32];
  const T* row = logits + blockIdx.x * V;
  float bv = -FLT_MAX;
  int64_t bi = V;
  if constexpr (kVec > 1) {
    for (int64_t base = threadIdx.x * static_cast<int64_t>(kVec); base < V;
         base += static_cast<int64_t>(blockDim.x) * kVec) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + base);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float v = ToF(e[j]);
        if (Better(v, base + j, bv, bi)) {
          bv = v;
          bi = base + j;
        }
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float v = ToF(row[i]);
      if (Better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (Better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
      if (Better(best_v[w], best_i[w], bv, bi)) {
        bv = best_v[w];
        bi = best_i[w];
      }
    }
    ids[blockIdx.x] = static_cast<int32_t>(bi < V ? bi : 0);
  }
}

}  // namespace

cudaError_t LaunchArgmaxRows(DType dtype, const void* logits, int64_t R, int64_t V, int32_t* ids,
                             cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = reinterpret_cast<uint64_t>(logits) % 16 == 0 && V % kVec == 0;
    if (vec) {
      ArgmaxKernel<T, kVec><<<static_cast<unsigned>(R), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), V, ids);
    } else {
      ArgmaxKernel<T, 1><<<static_cast<unsigned>(R), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), V, ids);
    }
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
