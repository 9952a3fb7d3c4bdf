#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gated_norm.h"

namespace treespec::cuda {
namespace {

// Block b = row·groups + k. Each thread reads and writes only its own
// elements, so g may alias y.
template <typename T>
__global__ void GateSumSquaresKernel(const T* y, const T* z, int64_t W, int64_t group, T* g,
                                     float* ss) {
  __shared__ float scratch[32];
  const int64_t groups = W / group;
  const int64_t row = blockIdx.x / groups, k = blockIdx.x % groups;
  const int64_t base = row * W + k * group;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    const float zz = ToF(z[base + c]);
    const float v = ToF(y[base + c]) * (zz / (1.0f + expf(-zz)));
    g[base + c] = FromF<T>(v);
    acc += v * v;
  }
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) ss[blockIdx.x] = acc;
}

template <typename T>
__global__ void GroupRmsScaleKernel(const T* g, const float* ss, const T* w, int64_t n, int64_t W,
                                    int64_t group, float count, float eps, T* out) {
  const int64_t groups = W / group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = i / W, c = i % W;
    const float inv = 1.0f / sqrtf(ss[row * groups + c / group] / count + eps);
    out[i] = FromF<T>(ToF(w[c]) * (ToF(g[i]) * inv));
  }
}

}  // namespace

cudaError_t LaunchGateSumSquares(DType dtype, const void* y, const void* z, int64_t R, int64_t W,
                                 int64_t group, void* g, float* ss, cudaStream_t stream) {
  if (group < 1 || W % group != 0) return cudaErrorInvalidValue;
  const int64_t blocks = R * (W / group);
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int threads = group >= 256 ? 256 : static_cast<int>((group + 31) / 32 * 32);
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    GateSumSquaresKernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(z), W, group, static_cast<T*>(g), ss);
    return cudaGetLastError();
  });
}

cudaError_t LaunchGroupRmsScale(DType dtype, const void* g, const float* ss, const void* w,
                                int64_t R, int64_t W, int64_t group, int64_t count, float eps,
                                void* out, cudaStream_t stream) {
  if (group < 1 || W % group != 0) return cudaErrorInvalidValue;
  const int64_t n = R * W;
  if (n == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    GroupRmsScaleKernel<T><<<GridFor(n, 256), 256, 0, stream>>>(
        static_cast<const T*>(g), ss, static_cast<const T*>(w), n, W, group,
        static_cast<float>(count), eps, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
