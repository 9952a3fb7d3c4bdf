#include <cmath>

#include "kernels/cpu/dense_ops.h"

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

void SiluMul(const float* gu, int T, int F, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<int64_t>(t) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<int64_t>(t) * F;
    for (int i = 0; i < F; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace treespec::cpu
