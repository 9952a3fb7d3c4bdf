#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace treespec::cuda {
namespace {

template <typename V>
__global__ void EmbeddingKernel(const int32_t* ids, const char* table, int64_t row_bytes,
                                char* out) {
  const int64_t t = blockIdx.x;
  CopyBytes<V>(table + static_cast<int64_t>(ids[t]) * row_bytes, out + t * row_bytes, row_bytes);
}

}  // namespace

cudaError_t LaunchEmbedding(const int32_t* ids, int64_t T, const void* table, int64_t row_bytes,
                            void* out, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const int width = CopyWidth({reinterpret_cast<uint64_t>(table), reinterpret_cast<uint64_t>(out),
                               static_cast<uint64_t>(row_bytes)});
  return DispatchWidth(width, [&](auto v) {
    using V = decltype(v);
    EmbeddingKernel<V><<<static_cast<unsigned>(T), 256, 0, stream>>>(
        ids, static_cast<const char*>(table), row_bytes, static_cast<char*>(out));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
