#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/skinny_linear.h"

namespace treespec::cuda {
namespace {

constexpr int kWarps = 4;        // warps per block
constexpr int kRowsPerWarp = 2;  // weight rows (outputs per token) per warp
constexpr int kUnroll = 4;       // 16-byte vectors in flight per weight row and lane

// Storage values per 16-byte vector.
template <typename V>
constexpr int kElems = 16 / sizeof(V);

// One 16-byte vector of storage values as floats (the pair conversions of
// cuda_fp16 / cuda_bf16: the code measured on the H200).
__device__ __forceinline__ void Unpack(uint4 v, float, float f[4]) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void Unpack(uint4 v, __half, float f[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ void Unpack(uint4 v, __nv_bfloat16, float f[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// acc[r][t] += Σ_i w_r[i] · x_t[i] over one vector, in element order.
template <typename V, int TT>
__device__ __forceinline__ void Accumulate(const uint4 (&wv)[kRowsPerWarp], const uint4* x,
                                           int64_t Kv, int64_t v, float (&acc)[kRowsPerWarp][TT]) {
  constexpr int E = kElems<V>;
  float wf[kRowsPerWarp][E];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) Unpack(wv[r], V{}, wf[r]);
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    float xf[E];
    Unpack(__ldg(x + t * Kv + v), V{}, xf);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int i = 0; i < E; ++i) acc[r][t] = fmaf(wf[r][i], xf[i], acc[r][t]);
    }
  }
}

// One warp: weight rows n0 and n0 + 1 (the second clamped to the first past
// N, and not written), every token. Weights stream with evict-first loads;
// x ([T, K], shared by every warp) stays in L1.
template <typename V, int TT>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyLinearKernel(const uint4* __restrict__ x, const uint4* __restrict__ w, int64_t Kv,
                       int64_t N, V* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) *
                     kRowsPerWarp;
  if (n0 >= N) return;
  const uint4* rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) rows[r] = w + (n0 + r < N ? n0 + r : n0) * Kv;
  float acc[kRowsPerWarp][TT];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = 0.0f;
  }
  int64_t v = lane;
  // Main loop: kUnroll vectors per row in flight, accumulated in the same
  // order as the remainder loop would (v, v + 32, ...).
  for (; v + 32 * (kUnroll - 1) < Kv; v += 32 * kUnroll) {
    uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) wv[u][r] = __ldcs(rows[r] + v + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) Accumulate<V, TT>(wv[u], x, Kv, v + 32 * u, acc);
  }
  for (; v < Kv; v += 32) {
    uint4 wv[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) wv[r] = __ldcs(rows[r] + v);
    Accumulate<V, TT>(wv, x, Kv, v, acc);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const float s = WarpSum(acc[r][t]);
      if (lane == r * TT + t && n0 + r < N) out[t * N + n0 + r] = FromF<V>(s);
    }
  }
}

template <typename V, int TT>
cudaError_t Launch(const void* x, const void* w, int64_t K, int64_t N, void* out,
                   cudaStream_t stream) {
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const int64_t blocks = (N + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  SkinnyLinearKernel<V, TT><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
      static_cast<const uint4*>(x), static_cast<const uint4*>(w), K / kElems<V>, N,
      static_cast<V*>(out));
  return cudaGetLastError();
}

// The instance for T rows, T in [1, kSkinnyMaxRows] (Is = T - 1).
template <typename V, int... Is>
cudaError_t LaunchRows(const void* x, const void* w, int64_t T, int64_t K, int64_t N, void* out,
                       cudaStream_t stream, std::integer_sequence<int, Is...>) {
  static_assert(kRowsPerWarp * kSkinnyMaxRows <= 32, "one lane writes each output");
  cudaError_t err = cudaErrorInvalidValue;
  (void)((T == Is + 1 && ((err = Launch<V, Is + 1>(x, w, K, N, out, stream)), true)) || ...);
  return err;
}

}  // namespace

bool SkinnyLinearFits(DType dtype, const void* x, const void* w, int64_t T, int64_t K) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int elems = dtype == DType::kF32 ? 4 : 8;
  return (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) && T >= 1 &&
         T <= kSkinnyMaxRows && K > 0 && K % elems == 0 && aligned(x) && aligned(w);
}

cudaError_t LaunchSkinnyLinear(DType dtype, const void* x, const void* w, int64_t T, int64_t K,
                               int64_t N, void* out, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  if (!SkinnyLinearFits(dtype, x, w, T, K)) return cudaErrorInvalidValue;
  return DispatchFloat(dtype, [&](auto tag) {
    return LaunchRows<decltype(tag)>(x, w, T, K, N, out, stream,
                                     std::make_integer_sequence<int, kSkinnyMaxRows>{});
  });
}

}  // namespace treespec::cuda
