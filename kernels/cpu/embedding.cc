#include <cstring>

#include "kernels/cpu/dense_ops.h"

namespace treespec::cpu {

void Embedding(const int32_t* ids, int T, const float* table, int D, float* out) {
  for (int t = 0; t < T; ++t) {
    std::memcpy(out + static_cast<int64_t>(t) * D, table + static_cast<int64_t>(ids[t]) * D,
                sizeof(float) * D);
  }
}

}  // namespace treespec::cpu
