#include <cmath>

#include "kernels/cpu/dense_ops.h"

namespace treespec::cpu {

void RmsNorm(const float* x, const float* w, int T, int D, float eps, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * D;
    float* yr = out + static_cast<int64_t>(t) * D;
    float ss = 0.0f;
    for (int i = 0; i < D; ++i) ss += xr[i] * xr[i];
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int i = 0; i < D; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void HeadRmsNorm(float* x, const float* w, int T, int W, int Dh, int h0, int n, float eps) {
  for (int t = 0; t < T; ++t) {
    float* row = x + static_cast<int64_t>(t) * W + static_cast<int64_t>(h0) * Dh;
    RmsNorm(row, w, n, Dh, eps, row);
  }
}

}  // namespace treespec::cpu
