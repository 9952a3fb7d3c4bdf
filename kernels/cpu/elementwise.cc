#include <cmath>

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/simd_exp.h"

namespace treespec::cpu {

void Add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void AddBias(float* x, const float* b, int T, int N) {
  for (int t = 0; t < T; ++t) {
    float* row = x + static_cast<int64_t>(t) * N;
    for (int i = 0; i < N; ++i) row[i] += b[i];
  }
}

namespace {

// silu(g)·u sixteen at a time (simd_exp.h), the tail masked: each element's
// value depends only on its own g and u, as in the scalar loop.
__attribute__((target("avx512f"))) void SiluMulAvx512(const float* gu, int T, int F, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<int64_t>(t) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<int64_t>(t) * F;
    for (int i = 0; i < F; i += 16) {
      const __mmask16 m = F - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (F - i)) - 1);
      const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
      _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(Silu(gv), _mm512_maskz_loadu_ps(m, u + i)));
    }
  }
}

}  // namespace

void SiluMul(const float* gu, int T, int F, float* out) {
  if (HaveAvx512F()) {
    SiluMulAvx512(gu, T, F, out);
    return;
  }
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<int64_t>(t) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<int64_t>(t) * F;
    for (int i = 0; i < F; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace treespec::cpu
