#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_ops.h"
#include "kernels/cpu/thread_pool.h"

namespace treespec::cpu {
namespace {

// q·k over Dh in a fixed order: 8 lane sums over d ≡ j mod 8, a fixed
// reduction tree, then the scalar tail; the same whatever the batch.
__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  const int n8 = n & ~7;
  for (int d = 0; d < n8; d += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  float r = _mm_cvtss_f32(s);
  for (int d = n8; d < n; ++d) r = std::fma(a[d], b[d], r);
  return r;
}

// out[d] = fma(w, v[d], out[d]).
__attribute__((target("avx2,fma"))) void AxpyAvx2(float w, const float* v, float* out, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  const int n8 = n & ~7;
  for (int d = 0; d < n8; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
  }
  for (int d = n8; d < n; ++d) out[d] = std::fma(w, v[d], out[d]);
}

float DotPortable(const float* a, const float* b, int n) {
  float dot = 0.0f;
  for (int d = 0; d < n; ++d) dot += a[d] * b[d];
  return dot;
}

void AxpyPortable(float w, const float* v, float* out, int n) {
  for (int d = 0; d < n; ++d) out[d] += w * v[d];
}

bool HaveAvx2Fma() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}

// The key slots token t (sequence s) may attend, in position order.
void VisibleSlots(const AttentionBatch& batch, int s, int t, std::vector<int64_t>* slots) {
  const int i = t - batch.query_start[s];
  const int ctx = batch.context_lens[s];
  const int qpos = ctx + batch.TailDepth(s, batch.prior_lens[s] + i);
  slots->clear();
  for (int p = 0; p < ctx; ++p) {
    if (batch.InWindow(qpos, p)) slots->push_back(batch.Slot(s, p));
  }
  for (int j = 0; j < batch.tail_len(s); ++j) {
    if (batch.Sees(s, i, j) && batch.InWindow(qpos, ctx + batch.TailDepth(s, j))) {
      slots->push_back(batch.Slot(s, ctx + j));
    }
  }
}

}  // namespace

// Each (token, head) pair is independent. Keys are visited in position order
// (committed prefix, then the visible tail tokens), so a tree node computes
// exactly the same float operations as the same token decoded on its own.
// Threads take chunks of (token, range of heads); which thread computes a
// pair does not change it.
void Attention(const float* q, const float* k_cache, const float* v_cache,
               const AttentionBatch& batch, int H, int Hkv, int Dh, float scale,
               float* out, int threads) {
  const int group = H / Hkv;
  const int T = batch.num_tokens();
  const bool simd = HaveAvx2Fma();
  float (*dot_fn)(const float*, const float*, int) = simd ? &DotAvx2 : &DotPortable;
  void (*axpy_fn)(float, const float*, float*, int) = simd ? &AxpyAvx2 : &AxpyPortable;
  std::vector<int> token_seq(T);
  for (int s = 0; s < batch.num_seqs; ++s) {
    for (int t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) token_seq[t] = s;
  }
  int64_t work = 0;
  for (int s = 0; s < batch.num_seqs; ++s) {
    work += static_cast<int64_t>(batch.num_new(s)) * (batch.context_lens[s] + batch.tail_len(s));
  }
  // Split when each thread gets >= ~32K multiply-adds; with fewer tokens
  // than threads (decode), split the heads too.
  const int parts = threads > 1 && work * H * Dh * 2 >= (int64_t{1} << 15) * threads ? threads : 1;
  const int hsplit = T >= 2 * parts ? 1 : std::min(H, 2 * parts);
  ParallelChunks(parts, T * hsplit, [&](int c) {
    thread_local std::vector<int64_t> slots;
    thread_local std::vector<float> scores;
    const int t = c / hsplit, hp = c % hsplit;
    VisibleSlots(batch, token_seq[t], t, &slots);
    scores.resize(slots.size());
    for (int h = H * hp / hsplit; h < H * (hp + 1) / hsplit; ++h) {
      const int g = h / group;
      const float* qh = q + (static_cast<int64_t>(t) * H + h) * Dh;
      float mx = -INFINITY;
      for (size_t k = 0; k < slots.size(); ++k) {
        const float* kh = k_cache + (slots[k] * Hkv + g) * Dh;
        scores[k] = dot_fn(qh, kh, Dh) * scale;
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
        axpy_fn(scores[k] * inv, vh, oh, Dh);
      }
    }
  });
}

}  // namespace treespec::cpu
