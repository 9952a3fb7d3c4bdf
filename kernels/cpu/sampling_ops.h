// Plain-loop float32 reference kernels for sampling math: argmax and the
// temperature / top-k / top-p transform of one row of logits.
#pragma once

#include <cstdint>

namespace treespec::cpu {

// Lowest index among the maxima of row [V].
int32_t ArgmaxRow(const float* row, int64_t V);
// in: row [V]; out: probs [V] (zeros outside the kept set, sums to 1).
void ProcessLogitsRow(const float* row, int64_t V, float temperature, int top_k, float top_p,
                      float* probs);

}  // namespace treespec::cpu
