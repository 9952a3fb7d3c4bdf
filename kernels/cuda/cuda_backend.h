// The CUDA backend (CreateCudaBackend in core/tensor/backend.h): fp16 or bf16
// storage (fp32 accepted for tests), fp32 accumulation, one non-blocking
// stream per backend on which every op, copy and graph is enqueued, cuBLAS
// for matrix products, a caching device allocator, and CUDA graphs captured
// from that stream.
//
// This header is for CUDA-aware tools (benchmarks) that need the stream to
// record events; models use only the Backend interface.
// Thread-compatible, like every Backend.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor/backend.h"

namespace treespec::cuda {

// The stream of a backend made by CreateCudaBackend; nullptr for any other backend.
cudaStream_t StreamOf(Backend* backend);

// Matrix products of at most `rows` rows (clamped to [0, 8]) take the
// bandwidth-bound few-row kernel (kernels/cuda/skinny_linear.h), larger ones
// cuBLAS; 0 sends all to cuBLAS. The default is kSkinnyDefaultRows (3), or
// TREESPEC_CUDA_SKINNY_ROWS when set. Returns the setting it replaced; -1 for
// a backend not made by CreateCudaBackend.
int SetSkinnyMaxRows(Backend* backend, int rows);

}  // namespace treespec::cuda
