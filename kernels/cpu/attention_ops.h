// Float32 kernels for rotary embedding + KV-cache writes and for
// attention over the paged KV cache with tree (ancestor) masks.
#pragma once

#include <cstdint>

#include "core/tensor/attention_batch.h"

namespace treespec::cpu {

// in: qkv [T, (H + 2·Hkv)·Dh], positions [T], inv_freq [rot_half] (rot_half
// <= Dh/2: the first 2·rot_half columns of each head rotate, the rest are copied);
// out: q [T, H, Dh]; k_cache, v_cache [num_slots, Hkv, Dh] at each token's slot.
void QkvRope(const float* qkv, const int32_t* positions, const float* inv_freq, int rot_half,
             const treespec::AttentionBatch& batch, int H, int Hkv, int Dh, float* q,
             float* k_cache, float* v_cache);

// Which inner loops Attention runs (attention.cc): kAuto takes the widest
// vector ones the head size and the CPU allow (AVX-512, else AVX2); kAvx2
// stops at AVX2; kScalar is the plain loops, kept for CPUs without AVX2. The
// narrower ones are also there for tools/bench/attention_bench and the tests.
enum class AttentionPath { kAuto, kAvx2, kScalar };

// in: q [T, H, Dh], k_cache, v_cache [num_slots, Hkv, Dh]; out: out [T, H, Dh].
void Attention(const float* q, const float* k_cache, const float* v_cache,
               const treespec::AttentionBatch& batch, int H, int Hkv, int Dh, float scale,
               float* out, int threads = 1, AttentionPath path = AttentionPath::kAuto);

}  // namespace treespec::cpu
