#include <algorithm>
#include <type_traits>

#include "kernels/cuda/add.h"
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

// One block per row, rows of whole 16-byte vectors: each thread loads its
// (at most kV) vectors of x and w at once, keeps them in registers through
// the block sum and writes its outputs from them: one read of x, every load
// of a thread in flight together (the two-pass RmsNormKernel re-reads x after
// the sum and loads one element per access: 8.5 us a 4096-wide row on an
// H200, ncu, cold caches). With r (AddRmsNorm), x becomes x + r first,
// rounded to storage as AddKernel rounds, and the norm is of that: the values
// of Add then RmsNorm, bit for bit, without the add's own launch and pass.
// In place (out = x, or out = r) is safe: a thread writes only what it read.
template <typename T, int kV>
__global__ void __launch_bounds__(1024)
    RmsNormVecKernel(T* x, const T* r, const T* w, int64_t D, float eps, T* out) {
  constexpr int kN = 16 / sizeof(T);
  __shared__ float scratch[32];
  const int64_t nvec = D / kN;
  uint4* xr = reinterpret_cast<uint4*>(x + blockIdx.x * D);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  uint4 xv[kV], wv[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < nvec) {
      xv[j] = xr[i];
      wv[j] = wr[i];
    }
  }
  if (r != nullptr) {
    const uint4* rr = reinterpret_cast<const uint4*>(r + blockIdx.x * D);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < nvec) {
        const uint4 rv = rr[i];
        T* xe = reinterpret_cast<T*>(&xv[j]);
        const T* re = reinterpret_cast<const T*>(&rv);
#pragma unroll
        for (int k = 0; k < kN; ++k) xe[k] = FromF<T>(ToF(xe[k]) + ToF(re[k]));
        xr[i] = xv[j];
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    if (threadIdx.x + static_cast<int64_t>(j) * blockDim.x < nvec) {
      const T* e = reinterpret_cast<const T*>(&xv[j]);
#pragma unroll
      for (int k = 0; k < kN; ++k) ss += ToF(e[k]) * ToF(e[k]);
    }
  }
  ss = BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  uint4* yr = reinterpret_cast<uint4*>(out + blockIdx.x * D);
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < nvec) {
      const T* xe = reinterpret_cast<const T*>(&xv[j]);
      const T* we = reinterpret_cast<const T*>(&wv[j]);
      uint4 y;
      T* ye = reinterpret_cast<T*>(&y);
#pragma unroll
      for (int k = 0; k < kN; ++k) ye[k] = FromF<T>(ToF(we[k]) * (ToF(xe[k]) * inv));
      yr[i] = y;
    }
  }
}

// Launches RmsNormVecKernel when the rows fit it (whole 16-byte vectors, at
// most 4096 of them, every pointer 16-byte aligned); false when they do not.
template <typename T>
bool LaunchVec(T* x, const T* r, const T* w, int64_t T_rows, int64_t D, float eps, T* out,
               cudaStream_t stream, cudaError_t* err) {
  constexpr int kN = 16 / sizeof(T);
  const int64_t nvec = D / kN;
  if (D % kN != 0 || nvec > 4 * 1024 ||
      CopyWidth({reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(r),
                 reinterpret_cast<uint64_t>(w), reinterpret_cast<uint64_t>(out)}) != 16) {
    return false;
  }
  // About two vectors a thread, whole warps, at most 1024 threads.
  const int threads = static_cast<int>(std::min<int64_t>(1024, ((nvec + 1) / 2 + 31) / 32 * 32));
  const int per_thread = static_cast<int>((nvec + threads - 1) / threads);
  const auto launch = [&](auto kv) {
    constexpr int kV = decltype(kv)::value;
    RmsNormVecKernel<T, kV><<<static_cast<unsigned>(T_rows), threads, 0, stream>>>(x, r, w, D, eps,
                                                                                   out);
    return cudaGetLastError();
  };
  if (per_thread <= 1) {
    *err = launch(std::integral_constant<int, 1>{});
  } else if (per_thread <= 2) {
    *err = launch(std::integral_constant<int, 2>{});
  } else {
    *err = launch(std::integral_constant<int, 4>{});
  }
  return true;
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
  return DispatchFloat(dtype, [&](auto tag) {
    using T_ = decltype(tag);
    cudaError_t err = cudaSuccess;
    // The kernel writes x only when given r: the cast drops no promise here.
    if (LaunchVec<T_>(const_cast<T_*>(static_cast<const T_*>(x)), nullptr,
                      static_cast<const T_*>(w), T, D, eps, static_cast<T_*>(out), stream, &err)) {
      return err;
    }
    const int threads = D >= 2048 ? 512 : (D >= 512 ? 256 : 128);
    RmsNormKernel<T_><<<static_cast<unsigned>(T), threads, 0, stream>>>(
        static_cast<const T_*>(x), static_cast<const T_*>(w), D, eps, static_cast<T_*>(out));
    return cudaGetLastError();
  });
}

cudaError_t LaunchAddRmsNorm(DType dtype, void* x, const void* r, const void* w, int64_t T,
                             int64_t D, float eps, void* out, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T_ = decltype(tag);
    cudaError_t err = cudaSuccess;
    if (LaunchVec<T_>(static_cast<T_*>(x), static_cast<const T_*>(r), static_cast<const T_*>(w),
                      T, D, eps, static_cast<T_*>(out), stream, &err)) {
      return err;
    }
    err = LaunchAdd(dtype, x, r, T * D, x, stream);
    if (err != cudaSuccess) return err;
    return LaunchRmsNorm(dtype, x, w, T, D, eps, out, stream);
  });
}

}  // namespace treespec::cuda
