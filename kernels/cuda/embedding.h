// Embedding lookup on the device (host launcher). Thread-compatible: enqueues
// on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace treespec::cuda {

// in: ids [T] i32 (range-checked by callers), table [V, row_bytes];
// out: out [T, row_bytes] = table[ids]. Rows are copied as raw bytes.
cudaError_t LaunchEmbedding(const int32_t* ids, int64_t T, const void* table, int64_t row_bytes,
                            void* out, cudaStream_t stream);

}  // namespace treespec::cuda
