// Runs an element functor over [0, n) as one grid-stride kernel: the runner
// of the per-element passes of ssm_tree_math.h. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace treespec::cuda {

template <typename Op>
__global__ void ForEachKernel(int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += stride) {
    op(e);
  }
}

// Enqueues op(e) for every e in [0, n) on `stream`; nothing when n <= 0 (no
// empty grid is ever launched).
template <typename Op>
cudaError_t ForEach(int64_t n, const Op& op, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  ForEachKernel<Op><<<GridFor(n, kThreads), kThreads, 0, stream>>>(n, op);
  return cudaGetLastError();
}

}  // namespace treespec::cuda
