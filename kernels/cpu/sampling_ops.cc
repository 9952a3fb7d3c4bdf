#include "kernels/cpu/sampling_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace treespec::cpu {

int32_t ArgmaxRow(const float* row, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void ProcessLogitsRow(const float* row, int64_t V, float temperature, int top_k, float top_p,
                      float* probs) {
  for (int64_t i = 0; i < V; ++i) probs[i] = 0.0f;
  const double inv_t = 1.0 / temperature;
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = (top_k > 0 && top_k < V) ? top_k : V;
  auto higher = [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  if (keep < V) {
    // top-p only ever narrows the top-k set: order just those.
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  } else if (top_p < 1.0f) {
    std::sort(order.begin(), order.end(), higher);
  }
  const double mx = row[ArgmaxRow(row, V)] * inv_t;
  std::vector<double> e(keep);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    e[i] = std::exp(static_cast<double>(row[order[i]]) * inv_t - mx);
    sum += e[i];
  }
  if (top_p < 1.0f) {
    double cum = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cum += e[i] / sum;
      if (cum >= top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) sum += e[i];
  }
  for (int64_t i = 0; i < keep; ++i) probs[order[i]] = static_cast<float>(e[i] / sum);
}

}  // namespace treespec::cpu
