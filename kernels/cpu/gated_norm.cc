// Mamba-2's gated RMSNorm (Hugging Face MambaRMSNormGated: the gate before
// the norm, normalised per group of columns), in two steps so that a
// tensor-parallel caller can add the groups' sums of squares over ranks
// in between. The second step divides and scales in RmsNorm's order.
#include <cmath>

#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec::cpu {

void GateSumSquares(const float* y, const float* z, int R, int W, int group, float* g, float* ss) {
  const int groups = W / group;
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < groups; ++k) {
      float acc = 0.0f;
      for (int c = k * group; c < (k + 1) * group; ++c) {
        const int64_t i = static_cast<int64_t>(r) * W + c;
        const float zz = z[i];
        const float v = y[i] * (zz / (1.0f + std::exp(-zz)));
        g[i] = v;
        acc += v * v;
      }
      ss[static_cast<int64_t>(r) * groups + k] = acc;
    }
  }
}

void GroupRmsScale(const float* g, const float* ss, const float* w, int R, int W, int group,
                   int count, float eps, float* out) {
  const int groups = W / group;
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < groups; ++k) {
      const float inv =
          1.0f / std::sqrt(ss[static_cast<int64_t>(r) * groups + k] / static_cast<float>(count) + eps);
      for (int c = k * group; c < (k + 1) * group; ++c) {
        const int64_t i = static_cast<int64_t>(r) * W + c;
        out[i] = w[c] * (g[i] * inv);
      }
    }
  }
}

}  // namespace treespec::cpu
