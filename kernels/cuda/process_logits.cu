// Sort-based: a segmented radix sort orders each row by descending logit
// (stable, so equal logits keep ascending ids, the CPU reference's tie rule);
// one block per row then takes the top-k prefix, finds the top-p cut with a
// block-wide prefix sum, and scatters the renormalised probabilities. The
// arithmetic is in double, as in the reference, so the cut lands on the same
// element unless the cumulative mass is within rounding of top_p.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/process_logits.h"

namespace treespec::cuda {
namespace {

constexpr int kThreads = 512;

size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

struct Layout {
  size_t keys_in, ids_in, keys_out, ids_out, offsets, sort_temp, sort_temp_bytes, total;
};

Layout MakeLayout(int64_t R, int64_t V) {
  Layout l{};
  const size_t n = static_cast<size_t>(R * V);
  size_t at = 0;
  l.keys_in = at;
  at += AlignUp(n * 4);
  l.ids_in = at;
  at += AlignUp(n * 4);
  l.keys_out = at;
  at += AlignUp(n * 4);
  l.ids_out = at;
  at += AlignUp(n * 4);
  l.offsets = at;
  at += AlignUp((R + 1) * 4);
  l.sort_temp = at;
  size_t temp = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n),
      static_cast<int>(R), static_cast<const int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr));
  l.sort_temp_bytes = temp;
  at += AlignUp(temp);
  l.total = at;
  return l;
}

// Keys are the logits as f32 with -0 turned into +0 (the reference compares
// with ==, under which they are equal); values are the column ids.
template <typename T>
__global__ void PrepareKernel(const T* logits, int64_t R, int64_t V, float* keys, int32_t* ids,
                              int32_t* offsets) {
  const int64_t n = R * V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    keys[i] = ToF(logits[i]) + 0.0f;
    ids[i] = static_cast<int32_t>(i % V);
    if (i % V == 0) offsets[i / V] = static_cast<int32_t>(i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) offsets[R] = static_cast<int32_t>(n);
}

// One block per row over keys/ids in the order the reference visits them
// (sorted descending, or the identity when no sort is needed).
__global__ void ProcessKernel(const float* keys, const int32_t* ids, int64_t V, double inv_t,
                              int64_t keep, float top_p, float* probs) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ double shared_value;
  __shared__ int64_t shared_cut;
  const float* k = keys + blockIdx.x * V;
  const int32_t* id = ids + blockIdx.x * V;
  float* out = probs + blockIdx.x * V;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) out[i] = 0.0f;

  double mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) mx = fmax(mx, static_cast<double>(k[i]));
  mx = Reduce(tmp.reduce).Reduce(mx, [](double a, double b) { return fmax(a, b); });
  if (threadIdx.x == 0) shared_value = mx * inv_t;
  __syncthreads();
  mx = shared_value;
  __syncthreads();

  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) {
    sum += exp(static_cast<double>(k[i]) * inv_t - mx);
  }
  sum = Reduce(tmp.reduce).Sum(sum);
  if (threadIdx.x == 0) shared_value = sum;
  __syncthreads();
  sum = shared_value;
  __syncthreads();

  if (top_p < 1.0f) {
    // Cut = 1 + the first index whose cumulative share reaches top_p.
    if (threadIdx.x == 0) shared_cut = keep;
    double carry = 0.0;
    for (int64_t base = 0; base < keep; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      const double share = i < keep ? exp(static_cast<double>(k[i]) * inv_t - mx) / sum : 0.0;
      double cum, total;
      Scan(tmp.scan).InclusiveSum(share, cum, total);
      cum += carry;
      carry += total;
      __syncthreads();
      if (i < keep && cum >= static_cast<double>(top_p)) atomicMin(
          reinterpret_cast<unsigned long long*>(&shared_cut), static_cast<unsigned long long>(i + 1));
      __syncthreads();
      if (shared_cut < keep) break;
    }
    keep = shared_cut;
    sum = 0.0;
    for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) {
      sum += exp(static_cast<double>(k[i]) * inv_t - mx);
    }
    __syncthreads();
    sum = Reduce(tmp.reduce).Sum(sum);
    if (threadIdx.x == 0) shared_value = sum;
    __syncthreads();
    sum = shared_value;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) {
    out[id[i]] = static_cast<float>(exp(static_cast<double>(k[i]) * inv_t - mx) / sum);
  }
}

}  // namespace

size_t ProcessLogitsWorkspaceBytes(int64_t R, int64_t V) { return MakeLayout(R, V).total; }

cudaError_t LaunchProcessLogits(DType dtype, const void* logits, int64_t R, int64_t V,
                                float temperature, int top_k, float top_p, float* probs,
                                void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (R == 0 || V == 0) return cudaSuccess;
  const Layout l = MakeLayout(R, V);
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  char* ws = static_cast<char*>(workspace);
  float* keys_in = reinterpret_cast<float*>(ws + l.keys_in);
  int32_t* ids_in = reinterpret_cast<int32_t*>(ws + l.ids_in);
  float* keys_out = reinterpret_cast<float*>(ws + l.keys_out);
  int32_t* ids_out = reinterpret_cast<int32_t*>(ws + l.ids_out);
  int32_t* offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  cudaError_t err = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    PrepareKernel<T><<<GridFor(R * V, 256), 256, 0, stream>>>(static_cast<const T*>(logits), R, V,
                                                             keys_in, ids_in, offsets);
    return cudaGetLastError();
  });
  if (err != cudaSuccess) return err;
  const int64_t keep = (top_k > 0 && top_k < V) ? top_k : V;
  const bool sort = keep < V || top_p < 1.0f;
  if (sort) {
    size_t temp = l.sort_temp_bytes;
    err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
        ws + l.sort_temp, temp, keys_in, keys_out, ids_in, ids_out, static_cast<int>(R * V),
        static_cast<int>(R), offsets, offsets + 1, 0, 32, stream);
    if (err != cudaSuccess) return err;
  }
  ProcessKernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(
      sort ? keys_out : keys_in, sort ? ids_out : ids_in, V, 1.0 / temperature, keep, top_p,
      probs);
  return cudaGetLastError();
}

}  // namespace treespec::cuda
