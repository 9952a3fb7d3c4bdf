#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/row_copy.h"

namespace treespec::cuda {
namespace {

// Index pairs travel in the kernel's parameters (2 KiB), so a copy needs no
// host-to-device transfer and can be captured in a CUDA graph.
constexpr int kMaxPairs = 256;
struct RowPairs {
  int32_t src[kMaxPairs];
  int32_t dst[kMaxPairs];
};

template <typename V>
__global__ void RowCopyKernel(const char* src, char* dst, int64_t row_bytes, RowPairs pairs) {
  const int i = blockIdx.x;
  CopyBytes<V>(src + static_cast<int64_t>(pairs.src[i]) * row_bytes,
               dst + static_cast<int64_t>(pairs.dst[i]) * row_bytes, row_bytes);
}

}  // namespace

cudaError_t LaunchRowCopy(const void* src, const std::vector<int32_t>& src_rows, void* dst,
                          const std::vector<int32_t>& dst_rows, int64_t n, int64_t row_bytes,
                          cudaStream_t stream) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  const int width = CopyWidth({reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst),
                               static_cast<uint64_t>(row_bytes)});
  const int threads = row_bytes / width >= 512 ? 256 : (row_bytes / width >= 128 ? 128 : 32);
  for (int64_t base = 0; base < n; base += kMaxPairs) {
    const int count = static_cast<int>(std::min<int64_t>(kMaxPairs, n - base));
    RowPairs pairs;
    for (int i = 0; i < count; ++i) {
      pairs.src[i] = src_rows.empty() ? static_cast<int32_t>(base + i) : src_rows[base + i];
      pairs.dst[i] = dst_rows.empty() ? static_cast<int32_t>(base + i) : dst_rows[base + i];
    }
    cudaError_t err = DispatchWidth(width, [&](auto v) {
      using V = decltype(v);
      RowCopyKernel<V><<<count, threads, 0, stream>>>(static_cast<const char*>(src),
                                                      static_cast<char*>(dst), row_bytes, pairs);
      return cudaGetLastError();
    });
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace treespec::cuda
