// LinearTyped's path for CPUs with AVX2, FMA and F16C but not AVX-512 (most
// desktop and laptop x86 CPUs: Intel's client cores since Alder Lake, AMD's
// before Zen 4). Every weight type is decoded to f32 in registers, eight
// lanes at a time, and multiplied with FMAs, as linear_typed.cc's AVX-512
// path does sixteen at a time; before, these CPUs took the scalar portable
// path for 16-bit and quantised weights.
//
// A 32-element chunk is taken as two halves of 16 (two ymm each), so that a
// tile of 4 activation rows × 2 weight rows keeps its 8 accumulators, the 4
// decoded vectors and an activation vector in the 16 ymm registers. Element
// e of a row always lands in lane e mod 8 of its accumulator and the chunks
// are added in order, then Reduce8's fixed tree: an output element gets the
// same float operations whatever the tile, the number of rows T or the
// thread (batch invariance, linear.cc's header). A 16-bit or f32 row whose
// length is not a multiple of 32 ends in a chunk copied into zero-padded
// buffers (zero weights and activations add nothing).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd_reduce.h"

namespace treespec::cpu {
namespace {

#define TS_AVX2 __attribute__((target("avx2,fma,f16c")))

// The f16 at `p` by the F16C instruction (dtype.h's HalfAt converts in software).
TS_AVX2 inline float F16cHalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ---- half decoders: elements [16s, 16s + 16) of the chunk at k → two ymm ----
// kElemBytes: bytes per element of the unquantised types (0: whole blocks).

struct F32W2 {
  static constexpr size_t kChunkBytes = 128, kElemBytes = 4;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const float* p = reinterpret_cast<const float*>(row) + k + 16 * s;
    w[0] = _mm256_loadu_ps(p);
    w[1] = _mm256_loadu_ps(p + 8);
  }
};

struct F16W2 {
  static constexpr size_t kChunkBytes = 64, kElemBytes = 2;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const __m128i* p = reinterpret_cast<const __m128i*>(row + 2 * (k + 16 * s));
    w[0] = _mm256_cvtph_ps(_mm_loadu_si128(p));
    w[1] = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
  }
};

struct BF16W2 {
  static constexpr size_t kChunkBytes = 64, kElemBytes = 2;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const __m128i* p = reinterpret_cast<const __m128i*>(row + 2 * (k + 16 * s));
    for (int h = 0; h < 2; ++h) {
      const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(p + h));
      w[h] = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
  }
};

// Sixteen signed or unsigned bytes → two ymm of their values times d (+ m).
TS_AVX2 inline void Widen(__m128i q, bool is_signed, __m256 d, __m256 m, __m256* w) {
  const __m128i hi8 = _mm_unpackhi_epi64(q, q);
  const __m256i a = is_signed ? _mm256_cvtepi8_epi32(q) : _mm256_cvtepu8_epi32(q);
  const __m256i b = is_signed ? _mm256_cvtepi8_epi32(hi8) : _mm256_cvtepu8_epi32(hi8);
  w[0] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(a), m);
  w[1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(b), m);
}

struct Q8_0W2 {
  static constexpr size_t kChunkBytes = 34, kElemBytes = 0;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const uint8_t* b = row + (k / 32) * 34;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * s));
    Widen(q, true, _mm256_set1_ps(F16cHalfAt(b)), _mm256_setzero_ps(), w);
  }
};

// Low nibbles are elements 0..15 of a Q4_0 / Q4_1 block, high nibbles 16..31.
TS_AVX2 inline __m128i Nibbles(const uint8_t* p, int s) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm_and_si128(s == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
}

struct Q4_0W2 {
  static constexpr size_t kChunkBytes = 18, kElemBytes = 0;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const uint8_t* b = row + (k / 32) * 18;
    const __m128i q = _mm_sub_epi8(Nibbles(b + 2, s), _mm_set1_epi8(8));
    Widen(q, true, _mm256_set1_ps(F16cHalfAt(b)), _mm256_setzero_ps(), w);
  }
};

struct Q4_1W2 {
  static constexpr size_t kChunkBytes = 20, kElemBytes = 0;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const uint8_t* b = row + (k / 32) * 20;
    Widen(Nibbles(b + 4, s), false, _mm256_set1_ps(F16cHalfAt(b)),
          _mm256_set1_ps(F16cHalfAt(b + 2)), w);
  }
};

// Q4_K: the chunk is sub-block j of a 256-element block (linear_typed.cc's
// Q4_KW): scale and min from the packed 6-bit pairs, codes one nibble half of
// 32 code bytes (16 of them per half chunk).
struct Q4_KW2 {
  static constexpr size_t kChunkBytes = 18, kElemBytes = 0;
  TS_AVX2 static inline void Decode(const uint8_t* row, int k, int s, __m256* w) {
    const uint8_t* b = row + (k / 256) * 144;
    const int j = (k % 256) / 32;
    uint8_t sc, mn;
    ScaleMinK4(j, b + 4, &sc, &mn);
    const uint8_t* p = b + 16 + 32 * (j / 2) + 16 * s;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i codes =
        _mm_and_si128(j % 2 == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    Widen(codes, false, _mm256_set1_ps(F16cHalfAt(b) * static_cast<float>(sc)),
          _mm256_set1_ps(-(F16cHalfAt(b + 2) * static_cast<float>(mn))), w);
  }
};

// One 32-element chunk at k: acc[i][j] += x[i][k..k+32) · w[j][k..k+32)
// lane-wise, a half chunk at a time. `ldx`: the stride of x's rows;
// kPrefetch: fetch the weight stream kWeightPrefetchBytes ahead (not in the
// padded tail copies).
template <class W, int TR, int NR, bool kPrefetch = true>
TS_AVX2 __attribute__((always_inline)) inline void Chunk(const float* x, int64_t ldx,
                                                         const uint8_t* w, size_t row_bytes,
                                                         int k, __m256 (&acc)[TR][NR]) {
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
    __m256 wv[NR][2];
#pragma GCC unroll 2
    for (int j = 0; j < NR; ++j) {
      if (kPrefetch && s == 0) {
        const char* ahead = reinterpret_cast<const char*>(w + j * row_bytes) +
                            static_cast<size_t>(k / 32) * W::kChunkBytes + kWeightPrefetchBytes;
        _mm_prefetch(ahead, _MM_HINT_T0);
        if (W::kChunkBytes > 64) _mm_prefetch(ahead + 64, _MM_HINT_T0);
      }
      W::Decode(w + j * row_bytes, k, s, wv[j]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < TR; ++i) {
      const float* xr = x + i * ldx + k + 16 * s;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 xv = _mm256_loadu_ps(xr + 8 * h);
#pragma GCC unroll 2
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j][h], acc[i][j]);
      }
    }
  }
}

// TR activation rows × NR weight rows; every (i, j) pair sees the same
// sequence of FMAs whatever TR and NR are.
template <class W, int TR, int NR>
TS_AVX2 __attribute__((always_inline)) inline void Tile(const float* x, const uint8_t* w,
                                                        size_t row_bytes, int K, int64_t ldo,
                                                        float* out) {
  __m256 acc[TR][NR];
  for (int i = 0; i < TR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int K32 = K & ~31;
  for (int k = 0; k < K32; k += 32) Chunk<W, TR, NR>(x, K, w, row_bytes, k, acc);
  if constexpr (W::kElemBytes > 0) {
    if (K32 < K) {
      // The tail chunk from zero-padded copies.
      alignas(32) float xpad[TR][32] = {};
      alignas(32) uint8_t wpad[NR][32 * W::kElemBytes] = {};
      for (int i = 0; i < TR; ++i) {
        std::memcpy(xpad[i], x + static_cast<int64_t>(i) * K + K32, (K - K32) * sizeof(float));
      }
      for (int j = 0; j < NR; ++j) {
        std::memcpy(wpad[j], w + j * row_bytes + K32 * W::kElemBytes, (K - K32) * W::kElemBytes);
      }
      Chunk<W, TR, NR, false>(&xpad[0][0], 32, &wpad[0][0], sizeof(wpad[0]), 0, acc);
    }
  }
  for (int i = 0; i < TR; ++i)
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = Reduce8(acc[i][j]);
}

// Output columns [n0, n1) for all T rows (WalkColumns, dense_ops.h; flatten
// inlines the walk and, within it, each tile).
template <class W>
TS_AVX2 __attribute__((flatten)) void Columns(
    const float* x, const uint8_t* w, size_t row_bytes, int T, int K, int N, int n0, int n1,
    float* out) {
  WalkColumns(row_bytes, T, n0, n1, [&](auto tr, auto nr, int t, int n) TS_AVX2 {
    Tile<W, tr, nr>(x + static_cast<int64_t>(t) * K, w + n * row_bytes, row_bytes, K, N,
                    out + static_cast<int64_t>(t) * N + n);
  });
}

template <class W>
void Run(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
         int threads) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t rb = DTypeBytes(wtype, K);
  ColumnChunks(T, K, N, threads,
               [&](int n0, int n1) { Columns<W>(x, wb, rb, T, K, N, n0, n1, out); });
}

}  // namespace

bool LinearTypedAvx2HasSimd() { return CpuHasAvx2FmaF16c(); }

void LinearTypedAvx2(const float* x, const void* w, DType wtype, int T, int K, int N,
                     float* out, int threads) {
  if (T == 0 || N == 0) return;
  switch (wtype) {
    case DType::kF32: Run<F32W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kF16: Run<F16W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kBF16: Run<BF16W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kQ8_0: Run<Q8_0W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kQ4_0: Run<Q4_0W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kQ4_1: Run<Q4_1W2>(x, w, wtype, T, K, N, out, threads); break;
    case DType::kQ4_K: Run<Q4_KW2>(x, w, wtype, T, K, N, out, threads); break;
    default: LinearTypedPortable(x, w, wtype, T, K, N, out, threads); break;
  }
}

}  // namespace treespec::cpu
