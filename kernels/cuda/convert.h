// Element type conversion on the device, behind Upload and DownloadF32 (host
// launcher). Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: src [n] of src_dtype (f32, f16, bf16, or i32 when dst_dtype is f32 or i32);
// out: dst [n] of dst_dtype (f32, f16, bf16 or i32), rounded to nearest even.
// Returns cudaErrorInvalidValue for any other pair.
cudaError_t LaunchConvert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
                          cudaStream_t stream);

}  // namespace treespec::cuda
