#include <cmath>

#include "kernels/cpu/mamba_ops.h"

namespace treespec::cpu {

void MambaConv(const float* x, int L, int C, const float* w, const float* b, int K,
               float* state, float* out) {
  for (int l = 0; l < L; ++l) {
    for (int c = 0; c < C; ++c) {
      float* st = state + static_cast<int64_t>(c) * K;
      for (int k = 0; k + 1 < K; ++k) st[k] = st[k + 1];
      st[K - 1] = x[static_cast<int64_t>(l) * C + c];
      const float* wc = w + static_cast<int64_t>(c) * K;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += st[k] * wc[k];
      acc += b[c];
      out[static_cast<int64_t>(l) * C + c] = acc / (1.0f + std::exp(-acc));
    }
  }
}

}  // namespace treespec::cpu
