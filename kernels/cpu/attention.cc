// Attention over the paged KV cache with tree (ancestor) masks.
//
// Each (token, head) pair is independent. Keys are visited in position order
// (committed prefix, then the visible tail tokens), so a tree node computes
// exactly the same float operations as the same token decoded on its own, and
// nothing depends on how many tokens or sequences share the call. Threads take
// chunks of (token, range of heads) from the CPU chunk pool (thread_pool.h);
// which thread computes a pair does not change it.
//
// A chunk walks the KV cache a row (slot) at a time, its heads of a key
// together, instead of one head's Dh floats out of every row per pass. The
// inner products and the weighted sum of values run eight lanes at a time
// (AVX2 + FMA) when the head size is a multiple of 8 and the CPU has them:
// q·k accumulates lanes d ≡ j mod 8 and reduces them in a fixed tree; the
// value sum adds each key's w·v into the output lanes in key order. Which path
// runs depends only on the head size and the CPU, never on the batch, so
// greedy speculation still equals plain decoding. The scalar loop was bound by
// the latency of one serial chain of Dh multiply-adds per key: at batch 64 on
// the demo target it took more of the worker's time than every matrix product
// (tools/bench/attention_bench compares the two paths).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_ops.h"
#include "kernels/cpu/simd_reduce.h"
#include "kernels/cpu/thread_pool.h"

namespace treespec::cpu {
namespace {

// Heads [h0, h1) of one query against one key row (a cache slot: Hkv heads of
// Dh): scores[(h - h0) * n] = scale · q_h·k_g, g = h / group.
using ScoreFn = void (*)(const float* q, const float* krow, int h0, int h1, int group, int Dh,
                         float scale, int64_t n, float* scores);
// out_h += w[(h - h0) * n] · v_g for heads [h0, h1), one value row.
using MixFn = void (*)(const float* w, const float* vrow, int h0, int h1, int group, int Dh,
                       int64_t n, float* out);

void ScoreScalar(const float* q, const float* krow, int h0, int h1, int group, int Dh, float scale,
                 int64_t n, float* scores) {
  for (int h = h0; h < h1; ++h) {
    const float* qh = q + static_cast<int64_t>(h) * Dh;
    const float* kh = krow + static_cast<int64_t>(h / group) * Dh;
    float dot = 0.0f;
    for (int d = 0; d < Dh; ++d) dot += qh[d] * kh[d];
    scores[(h - h0) * n] = dot * scale;
  }
}

void MixScalar(const float* w, const float* vrow, int h0, int h1, int group, int Dh, int64_t n,
               float* out) {
  for (int h = h0; h < h1; ++h) {
    const float* vh = vrow + static_cast<int64_t>(h / group) * Dh;
    float* oh = out + static_cast<int64_t>(h) * Dh;
    const float wh = w[(h - h0) * n];
    for (int d = 0; d < Dh; ++d) oh[d] += wh * vh[d];
  }
}

// Dh % 8 == 0.
__attribute__((target("avx2,fma"))) void ScoreAvx2(const float* q, const float* krow, int h0,
                                                   int h1, int group, int Dh, float scale,
                                                   int64_t n, float* scores) {
  for (int h = h0; h < h1; ++h) {
    const float* qh = q + static_cast<int64_t>(h) * Dh;
    const float* kh = krow + static_cast<int64_t>(h / group) * Dh;
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qh), _mm256_loadu_ps(kh));
    for (int d = 8; d < Dh; d += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), _mm256_loadu_ps(kh + d), acc);
    }
    scores[(h - h0) * n] = Reduce8(acc) * scale;
  }
}

// Dh % 8 == 0.
__attribute__((target("avx2,fma"))) void MixAvx2(const float* w, const float* vrow, int h0, int h1,
                                                 int group, int Dh, int64_t n, float* out) {
  for (int h = h0; h < h1; ++h) {
    const float* vh = vrow + static_cast<int64_t>(h / group) * Dh;
    float* oh = out + static_cast<int64_t>(h) * Dh;
    const __m256 wh = _mm256_set1_ps(w[(h - h0) * n]);
    for (int d = 0; d < Dh; d += 8) {
      _mm256_storeu_ps(oh + d,
                       _mm256_fmadd_ps(wh, _mm256_loadu_ps(vh + d), _mm256_loadu_ps(oh + d)));
    }
  }
}

bool HaveAvx2() {
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

// Softmax of each head's scores [heads][n] in place, keys in order.
void Softmax(float* scores, int heads, int64_t n) {
  for (int h = 0; h < heads; ++h) {
    float* sh = scores + h * n;
    float mx = -INFINITY;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, sh[k]);
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      sh[k] = std::exp(sh[k] - mx);
      sum += sh[k];
    }
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < n; ++k) sh[k] *= inv;
  }
}

}  // namespace

void Attention(const float* q, const float* k_cache, const float* v_cache,
               const AttentionBatch& batch, int H, int Hkv, int Dh, float scale, float* out,
               int threads, AttentionPath path) {
  const int group = H / Hkv;
  const int T = batch.num_tokens();
  const bool vector = path == AttentionPath::kAuto && Dh % 8 == 0 && HaveAvx2();
  const ScoreFn score = vector ? ScoreAvx2 : ScoreScalar;
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
  // Split when each thread gets >= ~32K multiply-adds; with fewer tokens
  // than threads (decode), split the heads too.
  const int parts = threads > 1 && work * H * Dh * 2 >= (int64_t{1} << 15) * threads ? threads : 1;
  const int hsplit = T >= 2 * parts ? 1 : std::min(H, 2 * parts);
  ParallelChunks(parts, T * hsplit, [&](int c) {
    thread_local std::vector<int64_t> slots;
    thread_local std::vector<float> scores;
    const int t = c / hsplit, hp = c % hsplit;
    const int h0 = H * hp / hsplit, h1 = H * (hp + 1) / hsplit;
    VisibleSlots(batch, token_seq[t], t, &slots);
    const int64_t n = static_cast<int64_t>(slots.size());
    scores.resize(static_cast<size_t>(h1 - h0) * n);
    const float* qt = q + static_cast<int64_t>(t) * H * Dh;
    float* ot = out + static_cast<int64_t>(t) * H * Dh;
    for (int64_t k = 0; k < n; ++k) {
      score(qt, k_cache + slots[k] * stride, h0, h1, group, Dh, scale, n, scores.data() + k);
    }
    Softmax(scores.data(), h1 - h0, n);
    std::fill(ot + static_cast<int64_t>(h0) * Dh, ot + static_cast<int64_t>(h1) * Dh, 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      mix(scores.data() + k, v_cache + slots[k] * stride, h0, h1, group, Dh, n, ot);
    }
  });
}

}  // namespace treespec::cpu
