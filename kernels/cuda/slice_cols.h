// Column slice on the device (host launcher). Thread-compatible: enqueues on
// the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace treespec::cuda {

// in: x [T, x_row_bytes]; out: out [T, out_row_bytes] = bytes
// [begin_bytes, begin_bytes + out_row_bytes) of each row of x.
cudaError_t LaunchSliceCols(const void* x, int64_t T, int64_t x_row_bytes, int64_t begin_bytes,
                            void* out, int64_t out_row_bytes, cudaStream_t stream);

}  // namespace treespec::cuda
