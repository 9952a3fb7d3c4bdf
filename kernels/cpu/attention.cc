#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_ops.h"

namespace treespec::cpu {

// Each (token, head) pair is independent. Keys are visited in position order
// (committed prefix, then the visible tail tokens), so a tree node computes
// exactly the same float operations as the same token decoded on its own.
void Attention(const float* q, const float* k_cache, const float* v_cache,
               const AttentionBatch& batch, int H, int Hkv, int Dh, float scale,
               float* out, int threads) {
  const int group = H / Hkv;
  const int T = batch.num_tokens();
  std::vector<int> token_seq(T);
  for (int s = 0; s < batch.num_seqs; ++s) {
    for (int t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) token_seq[t] = s;
  }
  int64_t work = 0;
  for (int s = 0; s < batch.num_seqs; ++s) {
    work += static_cast<int64_t>(batch.num_new(s)) * (batch.context_lens[s] + batch.tail_len(s));
  }
#pragma omp parallel num_threads(threads) if (threads > 1 && work * H * Dh > (1 << 21))
  {
    std::vector<int64_t> slots;
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < T; ++t) {
      const int s = token_seq[t];
      const int i = t - batch.query_start[s];
      const int ctx = batch.context_lens[s];
      const int qpos = ctx + batch.TailDepth(s, batch.prior_lens[s] + i);
      slots.clear();
      for (int p = 0; p < ctx; ++p) {
        if (batch.InWindow(qpos, p)) slots.push_back(batch.Slot(s, p));
      }
      for (int j = 0; j < batch.tail_len(s); ++j) {
        if (batch.Sees(s, i, j) && batch.InWindow(qpos, ctx + batch.TailDepth(s, j))) {
          slots.push_back(batch.Slot(s, ctx + j));
        }
      }
      scores.resize(slots.size());
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const float* qh = q + (static_cast<int64_t>(t) * H + h) * Dh;
        float mx = -INFINITY;
        for (size_t k = 0; k < slots.size(); ++k) {
          const float* kh = k_cache + (slots[k] * Hkv + g) * Dh;
          float dot = 0.0f;
          for (int d = 0; d < Dh; ++d) dot += qh[d] * kh[d];
          scores[k] = dot * scale;
          mx = std::max(mx, scores[k]);
        }
        float sum = 0.0f;
        for (size_t k = 0; k < slots.size(); ++k) {
          scores[k] = std::exp(scores[k] - mx);
          sum += scores[k];
        }
        float inv = 1.0f / sum;
        float* oh = out + (static_cast<int64_t>(t) * H + h) * Dh;
        for (int d = 0; d < Dh; ++d) oh[d] = 0.0f;
        for (size_t k = 0; k < slots.size(); ++k) {
          const float* vh = v_cache + (slots[k] * Hkv + g) * Dh;
          float w = scores[k] * inv;
          for (int d = 0; d < Dh; ++d) oh[d] += w * vh[d];
        }
      }
    }
  }
}

}  // namespace treespec::cpu
