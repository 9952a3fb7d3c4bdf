// The bf16 path of LinearTyped on CPUs with AVX-512 BF16: bf16 weights times
// activations split into two bf16 parts, by vdpbf16ps (linear_bf16.cc says
// why and how). Stateless; safe to call from any thread.
#pragma once

namespace treespec::cpu {

// Whether this CPU runs LinearBf16 (AVX-512 F/BW/VL/DQ and BF16).
bool LinearBf16HasSimd();

// in: x [T, K] f32, w [N, K] bf16; out: out [T, N] = (hi(x) + lo(x)) · wᵀ,
// where hi(x) = bf16(x) and lo(x) = bf16(x − hi(x)), both rounded to nearest
// even (|x − hi − lo| ≤ 2^-16·|x|). Batch- and thread-count-invariant; needs
// LinearBf16HasSimd().
void LinearBf16(const float* x, const void* w, int T, int K, int N, float* out, int threads);

}  // namespace treespec::cpu
