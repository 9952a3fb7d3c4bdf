// Attention over the paged KV cache with tree (ancestor) masks.
//
// Each (token, head) pair is independent. Keys are visited in position order
// (committed prefix, then the visible tail tokens), so a tree node computes
// exactly the same float operations as the same token decoded on its own, and
// nothing depends on how many tokens or sequences share the call.
//
// The inner products and the weighted sum of values run eight lanes at a time
// (AVX2 + FMA) when the head size is a multiple of 8 and the CPU has them:
// q·k accumulates lanes d ≡ j mod 8 and reduces them in a fixed tree; the
// value sum adds each key's w·v into the output lanes in key order. Which path
// runs depends only on the head size and the CPU, never on the batch, so
// greedy speculation still equals plain decoding. The scalar loop was bound by
// the latency of one serial chain of Dh multiply-adds per key: at batch 64 on
// the demo target it took more of the worker's time than every matrix product.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_ops.h"

namespace treespec::cpu {
namespace {

// scores[k] = scale · q·k_k over the keys at `slots`; returns the maximum.
using ScoreFn = float (*)(const float* qh, const float* k_cache, const int64_t* slots, size_t n,
                          int64_t stride, int Dh, float scale, float* scores);
// out = Σ_k w[k] · v_k, keys in order.
using MixFn = void (*)(const float* w, const float* v_cache, const int64_t* slots, size_t n,
                       int64_t stride, int Dh, float* out);

float ScoresScalar(const float* qh, const float* k_cache, const int64_t* slots, size_t n,
                   int64_t stride, int Dh, float scale, float* scores) {
  float mx = -INFINITY;
  for (size_t k = 0; k < n; ++k) {
    const float* kh = k_cache + slots[k] * stride;
    float dot = 0.0f;
    for (int d = 0; d < Dh; ++d) dot += qh[d] * kh[d];
    scores[k] = dot * scale;
    mx = std::max(mx, scores[k]);
  }
  return mx;
}

void MixScalar(const float* w, const float* v_cache, const int64_t* slots, size_t n, int64_t stride,
               int Dh, float* out) {
  for (int d = 0; d < Dh; ++d) out[d] = 0.0f;
  for (size_t k = 0; k < n; ++k) {
    const float* vh = v_cache + slots[k] * stride;
    for (int d = 0; d < Dh; ++d) out[d] += w[k] * vh[d];
  }
}

__attribute__((target("avx2,fma"))) inline float Reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

// Dh % 8 == 0.
__attribute__((target("avx2,fma"))) float ScoresAvx2(const float* qh, const float* k_cache,
                                                     const int64_t* slots, size_t n, int64_t stride,
                                                     int Dh, float scale, float* scores) {
  float mx = -INFINITY;
  for (size_t k = 0; k < n; ++k) {
    const float* kh = k_cache + slots[k] * stride;
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qh), _mm256_loadu_ps(kh));
    for (int d = 8; d < Dh; d += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), _mm256_loadu_ps(kh + d), acc);
    }
    scores[k] = Reduce8(acc) * scale;
    mx = std::max(mx, scores[k]);
  }
  return mx;
}

// Dh % 8 == 0.
__attribute__((target("avx2,fma"))) void MixAvx2(const float* w, const float* v_cache,
                                                 const int64_t* slots, size_t n, int64_t stride,
                                                 int Dh, float* out) {
  for (int d = 0; d < Dh; d += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t k = 0; k < n; ++k) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(v_cache + slots[k] * stride + d),
                            acc);
    }
    _mm256_storeu_ps(out + d, acc);
  }
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}

}  // namespace

void Attention(const float* q, const float* k_cache, const float* v_cache,
               const AttentionBatch& batch, int H, int Hkv, int Dh, float scale, float* out,
               int threads) {
  const int group = H / Hkv;
  const int T = batch.num_tokens();
  const bool vector = Dh % 8 == 0 && HaveAvx2();
  const ScoreFn score = vector ? ScoresAvx2 : ScoresScalar;
  const MixFn mix = vector ? MixAvx2 : MixScalar;
  const int64_t stride = static_cast<int64_t>(Hkv) * Dh;  // floats per cache slot
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
        const int64_t g = h / group;
        const float* qh = q + (static_cast<int64_t>(t) * H + h) * Dh;
        const float mx = score(qh, k_cache + g * Dh, slots.data(), slots.size(), stride, Dh, scale,
                               scores.data());
        float sum = 0.0f;
        for (float& sc : scores) {
          sc = std::exp(sc - mx);
          sum += sc;
        }
        const float inv = 1.0f / sum;
        for (float& sc : scores) sc *= inv;
        mix(scores.data(), v_cache + g * Dh, slots.data(), slots.size(), stride, Dh,
            out + (static_cast<int64_t>(t) * H + h) * Dh);
      }
    }
  }
}

}  // namespace treespec::cpu
