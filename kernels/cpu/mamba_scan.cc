#include <cmath>

#include "kernels/cpu/mamba_ops.h"

namespace treespec::cpu {

// Matches torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void MambaScan(const float* u, const float* delta, const float* dt_bias, const float* A,
               const float* Bm,
               const float* Cm, const float* D, const float* z, int L, int C, int N,
               float* state, float* y) {
  for (int l = 0; l < L; ++l) {
    const float* bl = Bm + static_cast<int64_t>(l) * N;
    const float* cl = Cm + static_cast<int64_t>(l) * N;
    for (int c = 0; c < C; ++c) {
      int64_t lc = static_cast<int64_t>(l) * C + c;
      float dt = Softplus(delta[lc] + dt_bias[c]);
      float uu = u[lc];
      float* h = state + static_cast<int64_t>(c) * N;
      const float* a = A + static_cast<int64_t>(c) * N;
      float acc = 0.0f;
      for (int n = 0; n < N; ++n) {
        h[n] = std::exp(dt * a[n]) * h[n] + (dt * bl[n]) * uu;
        acc += h[n] * cl[n];
      }
      acc += D[c] * u[lc];
      float zz = z[lc];
      y[lc] = acc * (zz / (1.0f + std::exp(-zz)));
    }
  }
}

}  // namespace treespec::cpu
