// Mamba's depthwise causal convolution for one sequence on the CPU. With
// AVX-512 the SiLU of each token's C outputs runs sixteen at a time
// (simd_exp.h; a scalar std::exp per channel before), the same whatever L,
// so a token's outputs do not depend on its batch or on prefill against
// step.
#include <cmath>

#include "kernels/cpu/mamba_ops.h"
#include "kernels/cpu/simd_exp.h"

namespace treespec::cpu {
namespace {

__attribute__((target("avx512f"))) void SiluRowAvx512(float* v, int C) {
  int c = 0;
  for (; c + 16 <= C; c += 16) _mm512_storeu_ps(v + c, Silu(_mm512_loadu_ps(v + c)));
  for (; c < C; ++c) v[c] = v[c] / (1.0f + std::exp(-v[c]));
}

}  // namespace

void MambaConv(const float* x, int L, int C, const float* w, const float* b, int K,
               float* state, float* out) {
  const bool avx512 = HaveAvx512F();
  for (int l = 0; l < L; ++l) {
    float* row = out + static_cast<int64_t>(l) * C;
    for (int c = 0; c < C; ++c) {
      float* st = state + static_cast<int64_t>(c) * K;
      for (int k = 0; k + 1 < K; ++k) st[k] = st[k + 1];
      st[K - 1] = x[static_cast<int64_t>(l) * C + c];
      const float* wc = w + static_cast<int64_t>(c) * K;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += st[k] * wc[k];
      row[c] = acc + b[c];
    }
    if (avx512) {
      SiluRowAvx512(row, C);
    } else {
      for (int c = 0; c < C; ++c) row[c] = row[c] / (1.0f + std::exp(-row[c]));
    }
  }
}

}  // namespace treespec::cpu
