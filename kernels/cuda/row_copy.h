// Copies whole rows between two row-major device buffers by index pairs: the
// kernel behind GatherRows, CopyRows (KV compaction, recurrent-state copies)
// and their two-phase form through a scratch buffer. Host launcher;
// thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace treespec::cuda {

// in: src [*, row_bytes], src_rows [n] (row indices; empty: 0..n-1);
// out: dst [*, row_bytes], row dst_rows[i] (empty: i) = row src_rows[i].
// All n copies run concurrently: the caller guarantees no row is both read
// and written, and no row written twice.
cudaError_t LaunchRowCopy(const void* src, const std::vector<int32_t>& src_rows, void* dst,
                          const std::vector<int32_t>& dst_rows, int64_t n, int64_t row_bytes,
                          cudaStream_t stream);

}  // namespace treespec::cuda
