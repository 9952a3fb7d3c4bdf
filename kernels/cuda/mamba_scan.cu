#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mamba_scan.h"

namespace treespec::cuda {
namespace {

constexpr int kThreads = 128;

// Matches torch.nn.functional.softplus (beta 1, threshold 20), as the CPU reference.
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// A group of G lanes (G = N rounded up to a power of two) owns one channel:
// lane n keeps h[n] in a register through the L steps, and C·h is a
// G-lane shuffle reduction. Every lane of a warp runs every step (channels
// past C and lanes past N compute on zeros) so the shuffles stay converged.
template <typename T>
__device__ __forceinline__ void ScanChannel(const T* u, const T* delta, const float* dt_bias,
                                            const float* A, const T* Bm, const T* Cm,
                                            const float* D, const T* z, int64_t L, int64_t C,
                                            int N, int G, int64_t c, bool valid, float* state,
                                            T* y) {
  const int n = threadIdx.x % G;
  const bool active = valid && n < N;
  float h = active ? state[c * N + n] : 0.0f;
  const float a = active ? A[c * N + n] : 0.0f;
  const float bias = valid ? dt_bias[c] : 0.0f;
  const float dd = valid ? D[c] : 0.0f;
  for (int64_t t = 0; t < L; ++t) {
    const int64_t tc = t * C + c;
    const float uu = valid ? ToF(u[tc]) : 0.0f;
    const float dt = Softplus((valid ? ToF(delta[tc]) : 0.0f) + bias);
    float part = 0.0f;
    if (active) {
      h = expf(dt * a) * h + (dt * ToF(Bm[t * N + n])) * uu;
      part = h * ToF(Cm[t * N + n]);
    }
    for (int o = G / 2; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if (valid && n == 0) {
      const float zz = ToF(z[tc]);
      y[tc] = FromF<T>((part + dd * uu) * Silu(zz));
    }
  }
  if (active) state[c * N + n] = h;
}

template <typename T>
__global__ void MambaScanKernel(const T* u, const T* delta, const float* dt_bias, const float* A,
                                const T* Bm, const T* Cm, const float* D, const T* z, int64_t L,
                                int64_t C, int N, int G, float* state, T* y) {
  const int64_t c = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / G;
  const bool valid = c < C;
  ScanChannel(u, delta, dt_bias, A, Bm, Cm, D, z, L, C, N, G, valid ? c : 0, valid, state, y);
}

template <typename T>
__global__ void MambaScanBatchKernel(const T* u, const T* delta, const float* dt_bias,
                                     const float* A, const T* Bm, const T* Cm, const float* D,
                                     const T* z, int64_t C, int N, int G, const int32_t* slots,
                                     float* states, T* y) {
  const int64_t c = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / G;
  const int64_t i = blockIdx.y;
  const bool valid = c < C;
  float* state = states + static_cast<int64_t>(slots[i]) * C * N;
  ScanChannel(u + i * C, delta + i * C, dt_bias, A, Bm + i * N, Cm + i * N, D, z + i * C, 1, C, N,
              G, valid ? c : 0, valid, state, y + i * C);
}

int GroupLanes(int N) {
  int g = 1;
  while (g < N) g *= 2;
  return g;
}

}  // namespace

cudaError_t LaunchMambaScan(DType dtype, const void* u, const void* delta, const float* dt_bias,
                            const float* A, const void* Bm, const void* Cm, const float* D,
                            const void* z, int64_t L, int64_t C, int N, float* state, void* y,
                            cudaStream_t stream) {
  if (N < 1 || N > 32) return cudaErrorInvalidValue;
  if (C == 0) return cudaSuccess;
  const int G = GroupLanes(N);
  const unsigned blocks = static_cast<unsigned>((C * G + kThreads - 1) / kThreads);
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MambaScanKernel<T><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(u), static_cast<const T*>(delta), dt_bias, A,
        static_cast<const T*>(Bm), static_cast<const T*>(Cm), D, static_cast<const T*>(z), L, C,
        N, G, state, static_cast<T*>(y));
    return cudaGetLastError();
  });
}

cudaError_t LaunchMambaScanBatch(DType dtype, const void* u, const void* delta,
                                 const float* dt_bias, const float* A, const void* Bm,
                                 const void* Cm, const float* D, const void* z, int64_t B,
                                 int64_t C, int N, const int32_t* slots, float* states, void* y,
                                 cudaStream_t stream) {
  if (N < 1 || N > 32) return cudaErrorInvalidValue;
  if (B == 0 || C == 0) return cudaSuccess;
  const int G = GroupLanes(N);
  const dim3 grid(static_cast<unsigned>((C * G + kThreads - 1) / kThreads),
                  static_cast<unsigned>(B));
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MambaScanBatchKernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(u), static_cast<const T*>(delta), dt_bias, A,
        static_cast<const T*>(Bm), static_cast<const T*>(Cm), D, static_cast<const T*>(z), C, N,
        G, slots, states, static_cast<T*>(y));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
