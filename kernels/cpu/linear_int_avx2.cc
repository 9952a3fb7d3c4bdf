// LinearTyped's integer path for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K /
// Q5_K / Q6_K weights on CPUs with AVX2 but not AVX-512 (linear_int.cc is the
// AVX-512 VNNI one).
//
// Why: the AVX2 f32 path (linear_typed_avx2.cc) dequantises every weight to
// f32 in registers, ~19 vector instructions per 32 Q4_1 weights before its 4
// FMAs, which leaves batch-1 decode bound by the ALUs, not by memory. Here the
// activations are rounded once per call exactly as linear_int.cc rounds them
// (int16 codes q per 32-element block, d = max|x| / 32767:
// QuantiseBlockI16Avx2 gives the AVX-512 function's codes bit for bit), and
// the weights are widened to int16 and multiplied by vpmaddwd: 2 per block
// and activation row, with ~6 instructions of decoding per block and weight
// row, shared by the tile's four activation rows.
//
// Arithmetic: a vpmaddwd lane adds two products; a block's two vpmaddwd,
// added, leave 8 int32 lanes of four products each, and a vphaddd packs two
// blocks into one vector (Tile), eight products a lane: exact when converted
// to f32 for the Q4 types (at most 8 · 32767 · 15 < 2^24; Q4_0's codes are
// taken as code − 8, Q4_1's and Q4_K's as 0..15), rounded at 2^-24 relative
// for Q8_0's larger codes. Q4_1's and Q4_K's mins are m·(d_x·Σq), one more
// FMA. The lanes are scaled by d_w·d_x and added to 8 f32 accumulators, block
// pairs in row order, and Reduce8 sums the lanes in a fixed tree: an output
// element gets the same operations whatever the tile (WalkColumns), the
// number of rows T or the thread (batch invariance). The results differ from
// linear_int.cc's (which adds its lanes in another order) in the last bits
// only; on the SmolLM2 Q4_1 goldens (this path forced on this CPU for a
// check) the top-20 logit error against transformers was 1.2e-3-2.3e-3
// against the AVX-512 path's 1.8e-3-2.6e-3, with the same greedy texts.
//
// Measured (linear_bench --path avx2 against --path avx2-f32, Zen 4, 1
// thread): decode (T = 1) 1.5-2.7x faster, prefill (T = 64) 1.04-1.33x.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/tensor/kquant.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/kquant_simd.h"
#include "kernels/cpu/linear_int.h"
#include "kernels/cpu/simd_reduce.h"

namespace treespec::cpu {
namespace {

#define TS_AVX2I __attribute__((target("avx2,fma,f16c")))

// One activation row's block: its codes and what the weight types need.
// pair_d and pair_dsum: set in the first block of each pair (b even, b + 1 <
// B), for the pair's lane layout (Tile).
struct alignas(32) XBlock {
  int16_t q[32];
  float dsum[8];       // d_x·Σq in lane 0 (Q4_1 and Q4_K's mins), zeros elsewhere
  float pair_d[8];     // d_x of blocks b, b + 1 as (b b b+1 b+1 b b b+1 b+1)
  float pair_dsum[8];  // d_x·Σq of block b in lane 0, of b + 1 in lane 2, zeros elsewhere
  float d;             // d_x
};

// One block of one weight row: codes as int16 (elements 0..15, 16..31), d_w
// and the min (Q4_1, Q4_K) broadcast.
struct WBlock {
  __m256i lo, hi;
  __m256 d, m;
};

TS_AVX2I inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Nibbles of 16 code bytes: low halves (elements 0..15 of Q4_0 / Q4_1), or
// high halves (16..31), as int16.
TS_AVX2I inline __m256i Nibbles(__m128i c, int shift) {
  return _mm256_cvtepu8_epi16(
      _mm_and_si128(_mm_srl_epi16(c, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(0x0f)));
}

// Block b of a weight row: Decode(row, b, state, out). State: what a type
// keeps between the blocks of one row (Q4_K: its block's scales).
struct Q8_0A {
  static constexpr size_t kBlockBytes = 34;
  static constexpr bool kHasMin = false;
  struct State {};
  TS_AVX2I static inline void Decode(const uint8_t* row, int b, State*, WBlock* o) {
    const uint8_t* p = row + b * kBlockBytes;
    o->lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
    o->hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18)));
    o->d = _mm256_set1_ps(F16At(p));
  }
};

// 16 bits of qh as int16 lanes: 16 where bit e is set, 0 elsewhere.
TS_AVX2I inline __m256i FifthBits(uint32_t bits) {
  const __m256i sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                        8192, 16384, static_cast<int16_t>(0x8000));
  const __m256i v = _mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(bits)), sel);
  return _mm256_and_si256(_mm256_cmpeq_epi16(v, sel), _mm256_set1_epi16(16));
}

// Q4_0 ([d f16][16 code bytes]; its codes taken as signed weights, code − 8)
// and Q4_1 ([d f16][m f16][16 code bytes]; codes 0..15, the min added apart);
// with kFive, Q5_0 ([d f16][qh u32][16 code bytes]; code − 16) and Q5_1 ([d
// f16][m f16][qh u32][16 code bytes]; codes 0..31): the same nibbles with
// bit j of qh added as element j's fifth bit. A pair's lane sums stay exact:
// at most 8 · 32767 · 31 < 2^24.
template <size_t kBytes, bool kMin, bool kFive>
struct QA {
  static constexpr size_t kBlockBytes = kBytes;
  static constexpr bool kHasMin = kMin;
  struct State {};
  TS_AVX2I static inline void Decode(const uint8_t* row, int b, State*, WBlock* o) {
    const uint8_t* p = row + b * kBlockBytes;
    const int codes = (kMin ? 4 : 2) + (kFive ? 4 : 0);
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + codes));
    o->lo = Nibbles(c, 0);
    o->hi = Nibbles(c, 4);
    if constexpr (kFive) {
      uint32_t qh;
      std::memcpy(&qh, p + codes - 4, 4);
      o->lo = _mm256_or_si256(o->lo, FifthBits(qh & 0xffff));
      o->hi = _mm256_or_si256(o->hi, FifthBits(qh >> 16));
    }
    if constexpr (kMin) {
      o->m = _mm256_set1_ps(F16At(p + 2));
    } else {
      const __m256i offset = _mm256_set1_epi16(kFive ? 16 : 8);
      o->lo = _mm256_sub_epi16(o->lo, offset);
      o->hi = _mm256_sub_epi16(o->hi, offset);
    }
    o->d = _mm256_set1_ps(F16At(p));
  }
};
using Q4_0A = QA<18, false, false>;
using Q4_1A = QA<20, true, false>;
using Q5_0A = QA<22, false, true>;
using Q5_1A = QA<24, true, true>;

// Q4_K: block b is sub-block j = b % 8 of the 144-byte block b / 8 ([d]
// [dmin][12 scale bytes][128 code bytes]); its weights are d·sc_j·code −
// dmin·mn_j (both products exact in f32), its codes the low (j even) or high
// (j odd) nibbles of code bytes 32·(j / 2) .. + 31. A row's eight scales and
// mins are unpacked when its sub-block 0 is reached.
// Q5_K (kFive; [d][dmin][12 scale bytes][32 bytes qh][128 code bytes], 176
// bytes): the same, with bit j of qh byte e added as the fifth bit (16) of
// sub-block j's element e (codes 0..31: exact, as Q5_0A's).
template <bool kFive>
struct KA {
  static constexpr size_t kSuperBytes = kFive ? 176 : 144;
  static constexpr size_t kBlockBytes = kSuperBytes / 8;  // of a 32-element sub-block
  static constexpr bool kHasMin = true;
  struct State {
    float scale[8], min[8];
  };
  TS_AVX2I static inline void Decode(const uint8_t* row, int b, State* s, WBlock* o) {
    const uint8_t* blk = row + (b / 8) * kSuperBytes;
    const int j = b % 8;
    if (j == 0) {
      // d·sc_k and −dmin·mn_k for k = 0..7, the scales unpacked by byte
      // shuffles (kquant_simd.h; ScaleMinK4 one pair at a time took about
      // two thirds of a decode step's product).
      const __m128i head = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
      const __m128i sm = UnpackKScales(head);
      const __m128 dd = _mm_cvtph_ps(head);  // d, dmin
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
      _mm256_storeu_ps(s->scale, _mm256_mul_ps(sc, _mm256_broadcastss_ps(dd)));
      _mm256_storeu_ps(s->min, _mm256_mul_ps(mn, _mm256_broadcastss_ps(_mm_sub_ps(
                                                     _mm_setzero_ps(), _mm_movehdup_ps(dd)))));
    }
    const uint8_t* codes = blk + (kFive ? 48 : 16) + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    o->lo = Nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)), shift);
    o->hi = Nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16)), shift);
    if constexpr (kFive) {
      const __m128i count = _mm_cvtsi32_si128(j);
      auto fifth = [&](int half) TS_AVX2I {
        const __m256i qh = _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 + 16 * half)));
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, count),
                                                  _mm256_set1_epi16(1)),
                                 4);
      };
      o->lo = _mm256_or_si256(o->lo, fifth(0));
      o->hi = _mm256_or_si256(o->hi, fifth(1));
    }
    o->d = _mm256_set1_ps(s->scale[j]);
    o->m = _mm256_set1_ps(s->min[j]);
  }
};
using Q4_KA = KA<false>;
using Q5_KA = KA<true>;

// Q6_K: block b is sub-block j = b % 8 of the 210-byte block b / 8 (layout:
// core/tensor/kquant.h); its weights are d·sc·(code − 32) with one int8 scale
// sc per 16 elements. Here each scale is multiplied into the codes as int16,
// sc·(code − 32) (|·| ≤ 4096), so a block's one f32 scale is d. A vpmaddwd
// lane then adds two products of at most 32767 · 4096 and a pair's lane
// sums eight (< 2^31): exact integers, rounded to f32 at 2^-24 relative as
// Q8_0's are. kBlockBytes (26 of the 26.25 a sub-block averages) serves the
// prefetch only; Decode addresses the 210-byte block.
struct Q6_KA {
  static constexpr size_t kBlockBytes = 26;
  static constexpr bool kHasMin = false;
  struct State {
    float d;
  };
  TS_AVX2I static inline void Decode(const uint8_t* row, int b, State* s, WBlock* o) {
    const uint8_t* blk = row + (b / 8) * 210;
    const int j = b % 8, h = j / 4, q = j % 4;
    if (j == 0) s->d = F16At(blk + 208);
    const uint8_t* ql = blk + 64 * h + 32 * (q % 2);
    const uint8_t* qh = blk + 128 + 32 * h;
    const __m128i count = _mm_cvtsi32_si128(2 * q);
    auto codes = [&](int half) TS_AVX2I {
      const __m256i top = _mm256_srl_epi16(
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * half))),
          count);
      const __m256i c = _mm256_or_si256(
          Nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * half)), 4 * (q / 2)),
          _mm256_slli_epi16(_mm256_and_si256(top, _mm256_set1_epi16(3)), 4));
      const int16_t sc = static_cast<int8_t>(blk[192 + 8 * h + 2 * q + half]);
      return _mm256_mullo_epi16(_mm256_sub_epi16(c, _mm256_set1_epi16(32)),
                                _mm256_set1_epi16(sc));
    };
    o->lo = codes(0);
    o->hi = codes(1);
    o->d = _mm256_set1_ps(s->d);
  }
};

// TR activation rows (B blocks each, rows B apart in `x`) × NR weight rows.
template <class W, int TR, int NR>
TS_AVX2I __attribute__((always_inline)) inline void Tile(const XBlock* x, int B,
                                                         const uint8_t* w, size_t row_bytes,
                                                         int64_t ldo, float* out) {
  __m256 acc[TR][NR];
  for (int i = 0; i < TR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  typename W::State state[NR];
  // Blocks in pairs (b, b + 1): each block's two vpmaddwd are added, and one
  // vphaddd packs the pair into lanes (b b b+1 b+1 | b b b+1 b+1), so one
  // conversion and one FMA (two with a min) serve two blocks. A pair's lane
  // sums add eight products: exact in f32 below 2^24 (Q4 codes, at most
  // 8 · 32767 · 15), rounded at 2^-24 relative beyond (Q8_0, up to
  // 8 · 32767 · 128). A row's last block, when B is odd, goes alone. One
  // weight row's blocks at a time against the TR activation rows (loaded
  // again for each weight row, from L1), to keep the ymm registers for the
  // accumulators.
  auto prefetch = [&](const uint8_t* row, int b) TS_AVX2I {
    _mm_prefetch(reinterpret_cast<const char*>(row + b * W::kBlockBytes) + kWeightPrefetchBytes,
                 _MM_HINT_T0);
  };
  auto codes = [](const XBlock& xb, int half) TS_AVX2I {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.q + 16 * half));
  };
  int b = 0;
  for (; b + 2 <= B; b += 2) {
    for (int j = 0; j < NR; ++j) {
      const uint8_t* row = w + j * row_bytes;
      prefetch(row, b);
      WBlock wa, wb;
      W::Decode(row, b, &state[j], &wa);
      W::Decode(row, b + 1, &state[j], &wb);
      const __m256 dw = _mm256_blend_ps(wa.d, wb.d, 0xcc);
      const __m256 mw = W::kHasMin ? _mm256_blend_ps(wa.m, wb.m, 0xcc) : _mm256_setzero_ps();
      for (int i = 0; i < TR; ++i) {
        const XBlock& xa = x[i * B + b];
        const XBlock& xb = x[i * B + b + 1];
        const __m256i sa = _mm256_add_epi32(_mm256_madd_epi16(codes(xa, 0), wa.lo),
                                            _mm256_madd_epi16(codes(xa, 1), wa.hi));
        const __m256i sb = _mm256_add_epi32(_mm256_madd_epi16(codes(xb, 0), wb.lo),
                                            _mm256_madd_epi16(codes(xb, 1), wb.hi));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(sa, sb)),
                                    _mm256_mul_ps(dw, _mm256_load_ps(xa.pair_d)), acc[i][j]);
        if (W::kHasMin) acc[i][j] = _mm256_fmadd_ps(mw, _mm256_load_ps(xa.pair_dsum), acc[i][j]);
      }
    }
  }
  if (b < B) {
    for (int j = 0; j < NR; ++j) {
      const uint8_t* row = w + j * row_bytes;
      WBlock wa;
      W::Decode(row, b, &state[j], &wa);
      for (int i = 0; i < TR; ++i) {
        const XBlock& xa = x[i * B + b];
        const __m256i sa = _mm256_add_epi32(_mm256_madd_epi16(codes(xa, 0), wa.lo),
                                            _mm256_madd_epi16(codes(xa, 1), wa.hi));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sa),
                                    _mm256_mul_ps(wa.d, _mm256_broadcast_ss(&xa.d)), acc[i][j]);
        if (W::kHasMin) acc[i][j] = _mm256_fmadd_ps(wa.m, _mm256_load_ps(xa.dsum), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < TR; ++i)
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = Reduce8(acc[i][j]);
}

// Output columns [n0, n1) for all T rows (WalkColumns, dense_ops.h).
template <class W>
TS_AVX2I __attribute__((flatten)) void Columns(const XBlock* x, int B, const uint8_t* w,
                                               size_t row_bytes, int T, int N, int n0, int n1,
                                               float* out) {
  WalkColumns(row_bytes, T, n0, n1, [&](auto tr, auto nr, int t, int n) TS_AVX2I {
    Tile<W, tr, nr>(x + static_cast<int64_t>(t) * B, B, w + n * row_bytes, row_bytes, N,
                    out + static_cast<int64_t>(t) * N + n);
  });
}

// One block of activations → codes in [-32767, 32767] (as 4 × 8 int32) and
// *d, by linear_int.cc's QuantiseBlock's operations.
TS_AVX2I inline void QuantiseBlock(const float* x, __m256i* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], m = _mm256_setzero_ps();
  for (int s = 0; s < 4; ++s) {
    v[s] = _mm256_loadu_ps(x + 8 * s);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[s]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 0x55));
  const float amax = _mm_cvtss_f32(m4);
  *d = amax / 32767.0f;
  const __m256 inv = _mm256_set1_ps(amax > 0 ? 32767.0f / amax : 0.0f);
  const __m256 hi = _mm256_set1_ps(32767.0f), lo = _mm256_set1_ps(-32767.0f);
  for (int s = 0; s < 4; ++s) {
    const __m256 r =
        _mm256_round_ps(_mm256_mul_ps(v[s], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[s] = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, r)));
  }
}

// 4 × 8 int32 codes → 32 int16 at `out`, in order.
TS_AVX2I inline void StoreCodes(const __m256i* q, int16_t* out) {
  for (int h = 0; h < 2; ++h) {
    // packs interleaves the 128-bit lanes: (a0 b0 a1 b1) → (a0 a1 b0 b1).
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2 * h], q[2 * h + 1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * h), p);
  }
}

TS_AVX2I void QuantiseRow(const float* x, int K, XBlock* blocks) {
  const int B = K / 32;
  for (int b = 0; b < B; ++b) {
    XBlock& xb = blocks[b];
    __m256i q[4];
    QuantiseBlock(x + 32 * b, q, &xb.d);
    StoreCodes(q, xb.q);
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    const int32_t sum_q = _mm_cvtsi128_si32(s4);
    std::memset(xb.dsum, 0, sizeof(xb.dsum));
    xb.dsum[0] = xb.d * static_cast<float>(sum_q);
  }
  for (int b = 0; b + 2 <= B; b += 2) {
    XBlock& xa = blocks[b];
    const XBlock& xb = blocks[b + 1];
    for (int l = 0; l < 8; ++l) xa.pair_d[l] = (l & 2) ? xb.d : xa.d;
    std::memset(xa.pair_dsum, 0, sizeof(xa.pair_dsum));
    xa.pair_dsum[0] = xa.dsum[0];
    xa.pair_dsum[2] = xb.dsum[0];
  }
}

template <class W>
void Run(const float* x, const uint8_t* w, DType wtype, int T, int K, int N, float* out,
         int threads) {
  const int B = K / 32;
  const size_t row_bytes = DTypeBytes(wtype, K);
  RoundRowsThenColumns<XBlock>(
      T, K, N, B, threads,
      [&](int t, XBlock* b) { QuantiseRow(x + static_cast<int64_t>(t) * K, K, b); },
      [&](const XBlock* xb, int n0, int n1) {
        Columns<W>(xb, B, w, row_bytes, T, N, n0, n1, out);
      });
}

}  // namespace

bool LinearIntAvx2HasSimd() { return LinearTypedAvx2HasSimd(); }

void LinearIntAvx2(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
                   int threads) {
  if (T == 0 || N == 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  switch (wtype) {
    case DType::kQ8_0: Run<Q8_0A>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_0: Run<Q4_0A>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_1: Run<Q4_1A>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_K: Run<Q4_KA>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_0: Run<Q5_0A>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_1: Run<Q5_1A>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_K: Run<Q5_KA>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ6_K: Run<Q6_KA>(x, wb, wtype, T, K, N, out, threads); break;
    default: break;
  }
}

TS_AVX2I void QuantiseBlockI16Avx2(const float* x, int16_t* q, float* d) {
  __m256i v[4];
  QuantiseBlock(x, v, d);
  StoreCodes(v, q);
}

}  // namespace treespec::cpu
