#include "kernels/cuda/common.cuh"
#include "kernels/cuda/slice_cols.h"

namespace treespec::cuda {
namespace {

template <typename V>
__global__ void SliceColsKernel(const char* x, int64_t x_row_bytes, int64_t begin_bytes,
                                char* out, int64_t out_row_bytes) {
  const int64_t t = blockIdx.x;
  CopyBytes<V>(x + t * x_row_bytes + begin_bytes, out + t * out_row_bytes, out_row_bytes);
}

}  // namespace

cudaError_t LaunchSliceCols(const void* x, int64_t T, int64_t x_row_bytes, int64_t begin_bytes,
                            void* out, int64_t out_row_bytes, cudaStream_t stream) {
  if (T == 0 || out_row_bytes == 0) return cudaSuccess;
  const int width =
      CopyWidth({reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(out),
                 static_cast<uint64_t>(x_row_bytes), static_cast<uint64_t>(begin_bytes),
                 static_cast<uint64_t>(out_row_bytes)});
  const int threads = out_row_bytes / width >= 256 ? 256 : 64;
  return DispatchWidth(width, [&](auto v) {
    using V = decltype(v);
    SliceColsKernel<V><<<static_cast<unsigned>(T), threads, 0, stream>>>(
        static_cast<const char*>(x), x_row_bytes, begin_bytes, static_cast<char*>(out),
        out_row_bytes);
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
