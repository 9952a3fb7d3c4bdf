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
//
// On CPUs with AVX-512 and a head size that is a multiple of 16 (the demo
// target's 32, SmolLM2's 64, a 7B's 128) a chunk runs the q heads of one kv
// head together (2 or 4 of them where the registers allow; each key and
// value row read once for them) through three vector passes over its keys:
// scores (the queries held in
// registers, a fixed 16-lane reduction per key), the softmax with a
// polynomial exp sixteen keys at a time (simd_exp.h; the AVX2 path's scalar
// std::exp was a third of a decode step's attention), and the value sum
// accumulated in registers across all keys and divided by the softmax sum
// once at the end. At context 256 on the demo heads this is ~4x the AVX2
// path per token; a long prompt's pieces, whose tokens attend hundreds of
// positions each, cost what the worker's pass-time model expects of them.
// The order of every sum is fixed by the key order alone, so the same token
// gets the same floats alone or in any batch, as above.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_ops.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd_exp.h"
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

bool HaveAvx2() { return CpuHasAvx2Fma(); }

#define TS_ATTN512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

constexpr int kMaxDh16 = 8;  // head sizes up to 128 keep a row in registers

// The C q heads from ha of one token, which share the kv head at offset g of
// a cache row, over its n visible key slots, with NV = Dh / 16: each key and
// value row is read once for all of them, and the per-head arithmetic is the
// same whatever C is (compile-time sizes keep the queries and accumulators
// in registers). scores: scratch of C · n floats.
template <int NV, int C>
TS_ATTN512 void HeadsAvx512(const float* qt, const float* k_cache, const float* v_cache,
                            const int64_t* slots, int64_t n, int ha, int64_t g, int64_t stride,
                            float scale, float* scores, float* ot) {
  constexpr int Dh = 16 * NV;
  const int64_t n16 = n & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - n16)) - 1);
  __m512 qv[C][NV];
  for (int j = 0; j < C; ++j) {
    for (int i = 0; i < NV; ++i) {
      qv[j][i] = _mm512_loadu_ps(qt + static_cast<int64_t>(ha + j) * Dh + 16 * i);
    }
  }
  // Scores.
  for (int64_t k = 0; k < n; ++k) {
    const float* kr = k_cache + slots[k] * stride + g;
    __m512 kv[NV];
    for (int i = 0; i < NV; ++i) kv[i] = _mm512_loadu_ps(kr + 16 * i);
    for (int j = 0; j < C; ++j) {
      __m512 acc = _mm512_mul_ps(qv[j][0], kv[0]);
      for (int i = 1; i < NV; ++i) acc = _mm512_fmadd_ps(qv[j][i], kv[i], acc);
      scores[j * n + k] = Reduce16(acc) * scale;
    }
  }
  // Per head: unnormalised weights exp(s - max) in place, and their sum.
  float inv[C];
  for (int j = 0; j < C; ++j) {
    float* sj = scores + j * n;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t k = 0; k < n16; k += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sj + k));
    if (n16 < n) mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, sj + n16));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < n16; k += 16) {
      const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(sj + k), m));
      _mm512_storeu_ps(sj + k, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (n16 < n) {
      const __m512 e = _mm512_maskz_mov_ps(
          tail, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, sj + n16), m)));
      _mm512_mask_storeu_ps(sj + n16, tail, e);
      sum = _mm512_add_ps(sum, e);
    }
    inv[j] = 1.0f / Reduce16(sum);
  }
  // Values weighted in key order, kept in registers: even keys into one set
  // of accumulators, odd keys into another (two FMA chains instead of one),
  // added at the end.
  __m512 acc[2][C][NV];
  for (int j = 0; j < C; ++j) {
    for (int i = 0; i < NV; ++i) acc[0][j][i] = acc[1][j][i] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* vr = v_cache + slots[k] * stride + g;
    __m512 vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = _mm512_loadu_ps(vr + 16 * i);
    auto& a = acc[k & 1];
    for (int j = 0; j < C; ++j) {
      const __m512 w = _mm512_set1_ps(scores[j * n + k]);
      for (int i = 0; i < NV; ++i) a[j][i] = _mm512_fmadd_ps(w, vv[i], a[j][i]);
    }
  }
  for (int j = 0; j < C; ++j) {
    float* oh = ot + static_cast<int64_t>(ha + j) * Dh;
    const __m512 s = _mm512_set1_ps(inv[j]);
    for (int i = 0; i < NV; ++i) {
      _mm512_storeu_ps(oh + 16 * i, _mm512_mul_ps(_mm512_add_ps(acc[0][j][i], acc[1][j][i]), s));
    }
  }
}

// C heads from ha: 4 together for NV <= 2, 2 for NV <= 4, else one at a
// time (their queries and accumulators must fit the 32 registers).
template <int NV>
TS_ATTN512 void HeadsOf(int c, const float* qt, const float* k_cache, const float* v_cache,
                        const int64_t* slots, int64_t n, int ha, int64_t g, int64_t stride,
                        float scale, float* scores, float* ot) {
  if (NV <= 2 && c == 4) {
    HeadsAvx512<NV, (NV <= 2 ? 4 : 1)>(qt, k_cache, v_cache, slots, n, ha, g, stride, scale,
                                       scores, ot);
  } else if (NV <= 4 && c == 2) {
    HeadsAvx512<NV, (NV <= 4 ? 2 : 1)>(qt, k_cache, v_cache, slots, n, ha, g, stride, scale,
                                       scores, ot);
  } else {
    for (int j = 0; j < c; ++j) {
      HeadsAvx512<NV, 1>(qt, k_cache, v_cache, slots, n, ha + j, g, stride, scale,
                         scores + j * n, ot);
    }
  }
}

// Heads [h0, h1) of one token over its n visible key slots, the q heads of
// one kv head together where the sizes allow; Dh % 16 == 0,
// Dh <= 16 · kMaxDh16. scores: scratch of (h1 - h0) · n floats.
TS_ATTN512 void ChunkAvx512(const float* qt, const float* k_cache, const float* v_cache,
                            const int64_t* slots, int64_t n, int h0, int h1, int group, int Dh,
                            int64_t stride, float scale, float* scores, float* ot) {
  // HeadsOf<NV>, NV = Dh / 16 in 1..kMaxDh16 (the caller checked).
  using HeadsFn = void (*)(int, const float*, const float*, const float*, const int64_t*,
                           int64_t, int, int64_t, int64_t, float, float*, float*);
  static constexpr HeadsFn kHeads[kMaxDh16] = {HeadsOf<1>, HeadsOf<2>, HeadsOf<3>, HeadsOf<4>,
                                               HeadsOf<5>, HeadsOf<6>, HeadsOf<7>, HeadsOf<8>};
  const HeadsFn heads = kHeads[Dh / 16 - 1];
  for (int h = h0; h < h1;) {
    const int kv = h / group;
    const int he = std::min(h1, (kv + 1) * group);
    const int64_t g = static_cast<int64_t>(kv) * Dh;
    heads(he - h, qt, k_cache, v_cache, slots, n, h, g, stride, scale,
          scores + static_cast<int64_t>(h - h0) * n, ot);
    h = he;
  }
}

// The key slots token t (sequence s) may attend, in position order.
void VisibleSlots(const AttentionBatch& batch, int s, int t, std::vector<int64_t>* slots) {
  const int i = t - batch.query_start[s];
  const int ctx = batch.context_lens[s];
  const int qpos = ctx + batch.TailDepth(s, batch.prior_lens[s] + i);
  slots->clear();
  // The committed context a block at a time (Slot's division per key was a
  // measurable part of a long context's attention).
  const int first = batch.sliding_window > 0 ? std::max(0, qpos - batch.sliding_window + 1) : 0;
  const int B = batch.block_size;
  for (int p = first; p < ctx;) {
    const int64_t base =
        static_cast<int64_t>(batch.block_tables[s * batch.max_blocks_per_seq + p / B]) * B;
    const int end = std::min(ctx, (p / B + 1) * B);
    for (int off = p % B; p < end; ++p, ++off) slots->push_back(base + off);
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
  // The head-at-a-time passes stride through the cache rows; past a page per
  // row (a 7B's 32 kv heads of 128 are 16 KiB) the AVX2 path's row-at-a-time
  // walk is faster.
  const bool wide = path == AttentionPath::kAuto && Dh % 16 == 0 && Dh <= 16 * kMaxDh16 &&
                    Hkv * Dh * sizeof(float) <= 4096 && HaveAvx512F();
  const bool vector = path != AttentionPath::kScalar && Dh % 8 == 0 && HaveAvx2();
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
    if (wide) {
      ChunkAvx512(qt, k_cache, v_cache, slots.data(), n, h0, h1, group, Dh, stride, scale,
                  scores.data(), ot);
      return;
    }
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
