#include <cmath>
#include <cstring>

#include "kernels/cpu/attention_ops.h"

namespace treespec::cpu {
namespace {

// Rotate-half RoPE (Hugging Face Llama convention) on the first 2·half
// columns, pairs (i, i + half); the rest are copied (partial rotary: Bamba
// rotates half of each head).
void Rotate(const float* x, int32_t pos, const float* inv_freq, int half, int Dh, float* y) {
  for (int i = 2 * half; i < Dh; ++i) y[i] = x[i];
  for (int i = 0; i < half; ++i) {
    float angle = static_cast<float>(pos) * inv_freq[i];
    float c = std::cos(angle), s = std::sin(angle);
    float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c - x2 * s;
    y[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

void QkvRope(const float* qkv, const int32_t* positions, const float* inv_freq, int rot_half,
             const AttentionBatch& batch, int H, int Hkv, int Dh, float* q, float* k_cache,
             float* v_cache) {
  const int64_t row = static_cast<int64_t>(H + 2 * Hkv) * Dh;
  for (int s = 0; s < batch.num_seqs; ++s) {
    for (int i = 0; i < batch.num_new(s); ++i) {
      int t = batch.query_start[s] + i;
      const float* src = qkv + t * row;
      for (int h = 0; h < H; ++h) {
        Rotate(src + h * Dh, positions[t], inv_freq, rot_half, Dh, q + (static_cast<int64_t>(t) * H + h) * Dh);
      }
      int64_t slot = batch.Slot(s, batch.Position(s, i));
      for (int g = 0; g < Hkv; ++g) {
        Rotate(src + (H + g) * Dh, positions[t], inv_freq, rot_half, Dh,
               k_cache + (slot * Hkv + g) * Dh);
        std::memcpy(v_cache + (slot * Hkv + g) * Dh, src + (H + Hkv + g) * Dh,
                    sizeof(float) * Dh);
      }
    }
  }
}

}  // namespace treespec::cpu
