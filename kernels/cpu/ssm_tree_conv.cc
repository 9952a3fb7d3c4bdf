// Mamba-2's depthwise causal conv over packed token trees (STree, paper 001
// §3): a row's K inputs are those of its root path, so it sees exactly what
// decoding the path one token at a time would have in its conv state: its
// own input, its K - 1 nearest ancestors' (newest last), and where the path
// is shorter, the newest entries of the committed conv state. The sum runs
// over the window oldest first, as MambaConv's decode step does.
#include <cmath>
#include <vector>

#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec::cpu {

void SsmTreeConv(const float* x, int Cd, const float* w, const float* b, int K,
                 const SsmTreeBatch& batch, float* states, float* out) {
  const int R = batch.num_rows();
  const int64_t state_size = static_cast<int64_t>(Cd) * K;
  std::vector<int32_t> out_slot(R, -1);
  for (size_t i = 0; i < batch.out_rows.size(); ++i) out_slot[batch.out_rows[i]] = batch.out_slots[i];
  // src[k] >= 0: window entry k is that row's input; < 0: committed state
  // entry -1 - src[k].
  std::vector<int32_t> src(K);
  for (int r = 0; r < R; ++r) {
    int32_t j = r, from_state = K - 1;
    for (int k = K - 1; k >= 0; --k) {
      if (j >= 0) {
        src[k] = j;
        j = batch.parent[j];
      } else {
        src[k] = -1 - from_state--;
      }
    }
    const float* committed = states + batch.slot[r] * state_size;
    float* dst = out_slot[r] >= 0 ? states + out_slot[r] * state_size : nullptr;
    for (int c = 0; c < Cd; ++c) {
      const float* wc = w + static_cast<int64_t>(c) * K;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) {
        const float v = src[k] >= 0 ? x[static_cast<int64_t>(src[k]) * Cd + c]
                                    : committed[static_cast<int64_t>(c) * K + (-1 - src[k])];
        acc += v * wc[k];
        if (dst != nullptr) dst[static_cast<int64_t>(c) * K + k] = v;
      }
      acc += b[c];
      out[static_cast<int64_t>(r) * Cd + c] = acc / (1.0f + std::exp(-acc));
    }
  }
}

}  // namespace treespec::cpu
