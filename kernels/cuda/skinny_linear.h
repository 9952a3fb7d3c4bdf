// Matrix products with few rows (decode and short verify steps) on the
// device: out [T, N] = x [T, K] · wᵀ, w [N, K], fp16, bf16 or fp32 storage,
// fp32 accumulation, for T ≤ kSkinnyMaxRows. Such a product reads each weight once
// and does T multiply-adds per weight: it is bound by HBM bandwidth, and this
// kernel is written for that (16-byte streaming loads of w, x through L1, one
// warp per two weight rows). Thread-compatible: enqueues on the caller's stream.
//
// Each output element is one lane-strided fp32 sum over K (lane ℓ takes the
// 16-byte vectors ℓ, ℓ + 32, ..., in that order, elements in order) reduced by a fixed warp
// butterfly, so its value does not depend on T, on the other rows of x or on
// N: results are batch-invariant for T ≤ kSkinnyMaxRows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

inline constexpr int kSkinnyMaxRows = 8;
// The CUDA backend's default: measured on an H200 (gpu_bench, 7B shapes, fp16,
// 2026-11-27), this kernel beats cuBLAS product by product by 3-17% at 1-3
// rows (the whole verify step by 5-7% at 1-3 tokens), ties at 4 and loses by
// up to 37% at 8 (it does T fp32 FMAs per weight and reads x T times per
// weight vector from L1).
inline constexpr int kSkinnyDefaultRows = 3;

// Whether SkinnyLinear takes this product: T in [1, kSkinnyMaxRows], dtype f32,
// f16 or bf16, rows of whole 16-byte vectors (K a multiple of 8, or of 4 for
// f32) and x, w 16-byte aligned.
bool SkinnyLinearFits(DType dtype, const void* x, const void* w, int64_t T, int64_t K);

// out [T, N] = x [T, K] · wᵀ (w [N, K], row-major); requires SkinnyLinearFits.
cudaError_t LaunchSkinnyLinear(DType dtype, const void* x, const void* w, int64_t T, int64_t K,
                               int64_t N, void* out, cudaStream_t stream);

}  // namespace treespec::cuda
