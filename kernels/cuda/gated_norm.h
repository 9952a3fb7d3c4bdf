// Mamba-2's gated RMSNorm (Hugging Face MambaRMSNormGated: gate, then a
// per-group RMSNorm) on the device, in the two halves of
// Backend::GateSumSquares / GroupRmsScale, so a tensor-parallel caller can
// all-reduce the sums of squares in between. Host launchers;
// thread-compatible: enqueue on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// in: y, z [R, W] of `dtype`; out: g [R, W] = y·silu(z) of `dtype` (may
// alias y), ss [R, W / group] f32 = Σ g² over each run of `group` columns,
// summed from the fp32 products before they are rounded to `dtype` (as
// torch computes the variance in fp32). One block per (row, group).
cudaError_t LaunchGateSumSquares(DType dtype, const void* y, const void* z, int64_t R, int64_t W,
                                 int64_t group, void* g, float* ss, cudaStream_t stream);

// in: g [R, W], w [W] of `dtype`, ss [R, W / group] f32 (sums over `count`
// values each); out: out [R, W] = w·(g / sqrt(ss / count + eps)) of `dtype`
// (may alias g). One thread per element.
cudaError_t LaunchGroupRmsScale(DType dtype, const void* g, const float* ss, const void* w,
                                int64_t R, int64_t W, int64_t group, int64_t count, float eps,
                                void* out, cudaStream_t stream);

}  // namespace treespec::cuda
