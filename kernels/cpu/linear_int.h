// The integer path of LinearTyped for ggml-quantised weights (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) on CPUs with AVX-512 VNNI: activations
// quantised per 32-element block to int16, integer dot products with
// vpdpbusd, one f32 scale per block
// (linear_int.cc says why and how). Stateless; safe to call from any thread.
#pragma once

#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cpu {

// Whether this CPU runs LinearInt (AVX-512 F/BW/VL/DQ and VNNI, F16C, FMA; no
// VBMI, so Cascade Lake as well as Ice Lake, Sapphire Rapids and Zen 4).
bool LinearIntHasSimd();

// Whether LinearInt (and LinearIntAvx2) take weights of `wtype` (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool LinearIntTakes(DType wtype);

// in: x [T, K] f32, w [N, K] as `wtype` (LinearIntTakes; K whole blocks);
// out: out [T, N] = q(x) · wᵀ, where q(x) is x rounded by QuantiseBlockI16.
// Batch-invariant and thread-count-invariant; needs LinearIntHasSimd().
void LinearInt(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
               int threads);

// The activation rounding of LinearInt for one 32-element block:
// in: x [32]; out: q [32] in [-32767, 32767] and *d = max|x| / 32767, so that
// x[k] ≈ *d · q[k] (error ≤ *d / 2). Exposed for the tests' reference; needs
// LinearIntHasSimd().
void QuantiseBlockI16(const float* x, int16_t* q, float* d);

// The integer path for CPUs with AVX2, FMA and F16C but not AVX-512
// (linear_int_avx2.cc): the same activation rounding, int16 products by
// vpmaddwd. Batch- and thread-count-invariant; needs LinearIntAvx2HasSimd()
// (runs on AVX-512 CPUs too, for the tests and linear_bench).
bool LinearIntAvx2HasSimd();
void LinearIntAvx2(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
                   int threads);
// QuantiseBlockI16 by AVX2 instructions: the same codes and scale, bit for
// bit. Needs LinearIntAvx2HasSimd().
void QuantiseBlockI16Avx2(const float* x, int16_t* q, float* d);

}  // namespace treespec::cpu
