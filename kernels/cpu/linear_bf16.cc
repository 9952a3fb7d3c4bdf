// LinearTyped's bf16 path (AVX-512 BF16): vdpbf16ps on the weights as stored.
//
// Why: the f32-FMA path (linear_typed.cc) widens every bf16 weight to f32
// first (a zero-extension and a shift per 16 weights) and then needs one FMA
// per 16 weights and activation row. vdpbf16ps multiplies 32 bf16 pairs into
// 16 f32 lanes in one instruction, with no widening: per 32 weights of a
// decode step 1 load and 2 vdpbf16ps instead of 2 loads, 4 integer ops and 2
// FMAs.
//
// Accuracy: vdpbf16ps needs both operands in bf16, and rounding the
// activations to bf16 (8 significant bits) would cost far more than the
// weights' own rounding. So each activation is split as x = hi + lo + r with
// hi = bf16(x) and lo = bf16(x − hi), both rounded to nearest even (x − hi is
// exact in f32): |r| ≤ 2^-16·|x|, and w·hi + w·lo is computed with exact
// products (bf16 × bf16 fits in f32) and f32 additions, like the f32 path.
// vdpbf16ps flushes subnormal inputs and results to zero (it ignores MXCSR):
// the same on every call, so results stay deterministic.
//
// Batch invariance (linear.cc's header): an output element's w·hi and w·lo
// each accumulate in 16 lanes, chunk by chunk of 32 elements in K order (a
// zero-filled tail for K not a multiple of 32); the two are added, then
// reduced by Reduce16's fixed tree —
// whatever the tile (4×2 for prefill, 1×1 for decode), the number of rows T
// or the thread. The split of a row depends on that row only.
#include "kernels/cpu/linear_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/simd_reduce.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512
// intrinsic headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace treespec::cpu {
namespace {

#define TS_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

// One activation row's chunk of 32 elements: hi and lo parts, 32 bf16 each.
struct alignas(64) XChunk {
  __m512bh hi, lo;
};

// One activation row → its chunks (zero beyond K).
TS_BF16 void SplitRow(const float* x, int K, XChunk* chunks) {
  for (int k = 0; k < K; k += 32) {
    const __mmask16 m0 = K - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (K - k)) - 1);
    const __mmask16 m1 = K - k >= 32   ? 0xffff
                         : K - k <= 16 ? 0
                                       : static_cast<__mmask16>((1u << (K - k - 16)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(m0, x + k), b = _mm512_maskz_loadu_ps(m1, x + k + 16);
    const __m512bh hi = _mm512_cvtne2ps_pbh(b, a);  // [bf16(a) | bf16(b)]
    const __m512i h = reinterpret_cast<__m512i>(hi);
    // hi back to f32: a bf16 is the top half of an f32.
    const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
        _mm512_castsi512_si256(h)), 16));
    const __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
        _mm512_extracti64x4_epi64(h, 1)), 16));
    XChunk& c = chunks[k / 32];
    c.hi = hi;
    c.lo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
  }
}

// The 64 bytes at p as two 32-byte loads: rows need not be 64-byte aligned,
// and unaligned 64-byte loads streamed from memory more slowly on this Zen 4
// (a 49152 x 576 product, 1 thread, T = 1: 1.50-1.54 ms against 1.74-1.86).
TS_BF16 inline __m512i Load64(const uint16_t* p) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)), 1);
}

// TR activation rows (C chunks each, rows C apart in `x`) × NR weight rows.
template <int TR, int NR>
TS_BF16 __attribute__((always_inline)) inline void Tile(const XChunk* x, int C, int K,
                                                        const uint16_t* w, int64_t ldo,
                                                        float* out) {
  // w·hi and w·lo go to separate accumulators (two dependency chains), added
  // at the end.
  __m512 acc[TR][NR], acc_lo[TR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = acc_lo[i][j] = _mm512_setzero_ps();
  const int full = K / 32;
  for (int c = 0; c < C; ++c) {
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint16_t* p = w + static_cast<int64_t>(j) * K + 32 * c;
      if (c < full) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + kWeightPrefetchBytes, _MM_HINT_T0);
        wv[j] = reinterpret_cast<__m512bh>(Load64(p));
      } else {  // the tail: zero beyond K
        const __mmask32 m = static_cast<__mmask32>((1ull << (K - 32 * c)) - 1);
        wv[j] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, p));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; ++i) {
      const XChunk& xc = x[i * C + c];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xc.hi, wv[j]);
        acc_lo[i][j] = _mm512_dpbf16_ps(acc_lo[i][j], xc.lo, wv[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = Reduce16(_mm512_add_ps(acc[i][j], acc_lo[i][j]));
}

// Output columns [n0, n1) for all T rows (WalkColumns, dense_ops.h; flatten
// inlines the walk and, within it, each tile).
TS_BF16 __attribute__((flatten)) void Columns(
    const XChunk* x, int C, const uint16_t* w, int T, int K, int N, int n0, int n1, float* out) {
  WalkColumns(2 * static_cast<size_t>(K), T, n0, n1, [&](auto tr, auto nr, int t, int n) TS_BF16 {
    Tile<tr, nr>(x + static_cast<int64_t>(t) * C, C, K, w + static_cast<int64_t>(n) * K, N,
                 out + static_cast<int64_t>(t) * N + n);
  });
}

}  // namespace

bool LinearBf16HasSimd() {
  static const bool have = CpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
  return have;
}

void LinearBf16(const float* x, const void* w, int T, int K, int N, float* out, int threads) {
  if (T == 0 || N == 0) return;
  const int C = (K + 31) / 32;
  thread_local std::vector<XChunk> chunks;
  chunks.resize(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; ++t) SplitRow(x + static_cast<int64_t>(t) * K, K, &chunks[t * C]);
  const XChunk* xc = chunks.data();
  const uint16_t* wb = static_cast<const uint16_t*>(w);
  ColumnChunks(T, K, N, threads, [&](int n0, int n1) {
    Columns(xc, C, wb, T, K, N, n0, n1, out);
  });
  TrimScratch(&chunks);
}

}  // namespace treespec::cpu
