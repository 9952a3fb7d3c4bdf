// Batch-invariant out = x · wᵀ with f32 activations and weights kept in memory
// as f32, f16, bf16 or ggml quantised blocks (Q8_0, Q4_0, Q4_1, Q4_K): 2× to 7×
// fewer bytes per decode step than f32 weights. On CPUs without AVX-512, f32
// goes to linear.cc's AVX2 kernel, quantised weights to linear_int_avx2.cc's
// integer path, the 16-bit types to linear_typed_avx2.cc (all need AVX2, FMA
// and F16C) and everything to a portable loop without them.
//
// Weights are dequantised in registers (a 32-element chunk at a time: f16 by
// vcvtph2ps, bf16 by a 16-bit shift, quantised blocks by widening the int8 /
// nibble codes and scaling) and multiplied with the f32 activations by f32
// FMAs: the result equals the f32 product with the dequantised matrix up to
// float summation order. For quantised weights this costs ~19 vector ops per
// 32 Q4_1 weights, which made batch-1 decode ALU-bound; on CPUs with AVX-512
// VNNI they take linear_int.cc's integer path instead (activations rounded to
// int16 per block, an error ~1e-5 of the block's largest value), and this
// file's quantised kernels remain the path of AVX-512 CPUs without VNNI.
// Likewise bf16 weights take linear_bf16.cc's vdpbf16ps path where the CPU
// has AVX-512 BF16.
//
// Batch invariance (linear.cc's header): every output element is one dot
// product in one fixed order — 16 lane accumulators walked over the chunks of
// K in order (a masked, zero-filled tail for K not a multiple of 16), then a
// fixed reduction tree — whatever tile it falls in, the number of rows T or
// the thread that computes it. Threads split the output columns only
// (ColumnChunks over kernels/cpu/thread_pool.h).
#include <immintrin.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_int.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd_reduce.h"
#include "kernels/cpu/thread_pool.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512
// intrinsic headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace treespec::cpu {
namespace {

#define TS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

// ---- chunk decoders: 32 weights of one row → two zmm -------------------------
// `k` is the chunk's first element, `K` the row length (16-bit types mask the
// tail; quantised rows are whole blocks).
// The masks m[2] select the valid elements of the chunk's two halves (all
// ones except in a 16-bit row's tail chunk, where kTail is set).
template <bool kTail>
TS_AVX512 inline __m256i Load16x16(const uint16_t* p, __mmask16 m) {
  if (kTail) return _mm256_maskz_loadu_epi16(m, p);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// kCols: weight rows per tile against four activation rows (WalkColumns).
struct F32W {
  static constexpr size_t kChunkBytes = 128;
  static constexpr int kCols = 4;
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16* m, __m512* w) {
    const float* p = reinterpret_cast<const float*>(row) + k;
    w[0] = kTail ? _mm512_maskz_loadu_ps(m[0], p) : _mm512_loadu_ps(p);
    w[1] = kTail ? _mm512_maskz_loadu_ps(m[1], p + 16) : _mm512_loadu_ps(p + 16);
  }
};

struct F16W {
  static constexpr size_t kChunkBytes = 64;
  static constexpr int kCols = 4;
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16* m, __m512* w) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + k;
    w[0] = _mm512_cvtph_ps(Load16x16<kTail>(p, m[0]));
    w[1] = _mm512_cvtph_ps(Load16x16<kTail>(p + 16, m[1]));
  }
};

struct BF16W {
  static constexpr size_t kChunkBytes = 64;
  static constexpr int kCols = 4;
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16* m, __m512* w) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + k;
    for (int s = 0; s < 2; ++s) {
      const __m512i u = _mm512_cvtepu16_epi32(Load16x16<kTail>(p + 16 * s, m[s]));
      w[s] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
  }
};

TS_AVX512 inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

struct Q8_0W {
  static constexpr size_t kChunkBytes = 34;
  static constexpr int kCols = 2;  // decoding needs the registers
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16*, __m512* w) {
    const uint8_t* b = row + (k / 32) * 34;
    const __m512 d = _mm512_set1_ps(HalfAt(b));
    for (int s = 0; s < 2; ++s) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * s));
      w[s] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  }
};

struct Q4_0W {
  static constexpr size_t kChunkBytes = 18;
  static constexpr int kCols = 2;  // decoding needs the registers
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16*, __m512* w) {
    const uint8_t* b = row + (k / 32) * 18;
    const __m512 d = _mm512_set1_ps(HalfAt(b));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    const __m512i eight = _mm512_set1_epi32(8);
    w[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight)));
    w[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight)));
  }
};

struct Q4_1W {
  static constexpr size_t kChunkBytes = 20;
  static constexpr int kCols = 2;  // decoding needs the registers
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16*, __m512* w) {
    const uint8_t* b = row + (k / 32) * 20;
    const __m512 d = _mm512_set1_ps(HalfAt(b)), m = _mm512_set1_ps(HalfAt(b + 2));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    w[0] = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo))), m);
    w[1] = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi))), m);
  }
};

// Q4_K: a 32-element chunk is one sub-block of a 256-element block (144
// bytes; core/tensor/kquant.h's DequantizeQ4KBlock): its scale and min from the
// block's packed 6-bit pairs, its codes one nibble half of 32 code bytes.
// kChunkBytes is the block's bytes per 32 elements (for the prefetch).
struct Q4_KW {
  static constexpr size_t kChunkBytes = 18;
  static constexpr int kCols = 2;  // decoding needs the registers
  template <bool kTail>
  TS_AVX512 static inline void Decode(const uint8_t* row, int k, const __mmask16*, __m512* w) {
    const uint8_t* b = row + (k / 256) * 144;
    const int j = (k % 256) / 32;
    uint8_t sc, mn;
    ScaleMinK4(j, b + 4, &sc, &mn);
    const __m512 d = _mm512_set1_ps(HalfAt(b) * static_cast<float>(sc));
    const __m512 m = _mm512_set1_ps(-(HalfAt(b + 2) * static_cast<float>(mn)));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * (j / 2)));
    const __m256i codes = _mm256_and_si256(j % 2 == 0 ? q : _mm256_srli_epi16(q, 4),
                                           _mm256_set1_epi8(0x0f));
    const __m128i half[2] = {_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1)};
    for (int s = 0; s < 2; ++s) {
      w[s] = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(half[s]))), m);
    }
  }
};

// Byte offset of the chunk at element k within a row.
template <class W>
inline size_t DTypeBytesPerChunk(int k) { return static_cast<size_t>(k / 32) * W::kChunkBytes; }

// One 32-element chunk at k: acc[i][j] += x[i][k..k+32) · w[j][k..k+32) lane-wise.
template <class W, int TR, int NR, bool kTail>
TS_AVX512 __attribute__((always_inline)) inline void Chunk(const float* x, const uint8_t* w,
                                                           size_t row_bytes, int K, int k,
                                                           const __mmask16* m,
                                                           __m512 (&acc)[TR][NR]) {
  __m512 wv[NR][2];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    // The matrix is one contiguous stream; fetch kWeightPrefetchBytes ahead.
    const char* ahead = reinterpret_cast<const char*>(w + j * row_bytes) +
                        DTypeBytesPerChunk<W>(k) + kWeightPrefetchBytes;
    _mm_prefetch(ahead, _MM_HINT_T0);
    if (W::kChunkBytes > 64) _mm_prefetch(ahead + 64, _MM_HINT_T0);
    W::template Decode<kTail>(w + j * row_bytes, k, m, wv[j]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i) {
    const float* xr = x + static_cast<int64_t>(i) * K + k;
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
      const __m512 xv = kTail ? _mm512_maskz_loadu_ps(m[s], xr + 16 * s) : _mm512_loadu_ps(xr + 16 * s);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j][s], acc[i][j]);
    }
  }
}

// TR activation rows × NR weight rows; every (i, j) pair sees the same
// sequence of FMAs whatever TR and NR are.
template <class W, int TR, int NR>
TS_AVX512 __attribute__((always_inline)) inline void Tile(const float* x, const uint8_t* w,
                                                          size_t row_bytes, int K, int64_t ldo,
                                                          float* out) {
  __m512 acc[TR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const __mmask16 full[2] = {0xffff, 0xffff};
  const int K32 = K & ~31;
  for (int k = 0; k < K32; k += 32) Chunk<W, TR, NR, false>(x, w, row_bytes, K, k, full, acc);
  if (K32 < K) {
    // The 16-bit types' tail: zero-filled lanes add nothing to any element.
    __mmask16 m[2];
    for (int s = 0; s < 2; ++s) {
      const int left = K - K32 - 16 * s;
      m[s] = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    }
    Chunk<W, TR, NR, true>(x, w, row_bytes, K, K32, m, acc);
  }
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = Reduce16(acc[i][j]);
}

// Output columns [n0, n1) for all T rows (WalkColumns, dense_ops.h; flatten
// inlines the walk and, within it, each tile).
template <class W>
TS_AVX512 __attribute__((flatten)) void Columns(
    const float* x, const uint8_t* w, size_t row_bytes, int T, int K, int N, int n0, int n1,
    float* out) {
  WalkColumns<4, W::kCols>(row_bytes, T, n0, n1, [&](auto tr, auto nr, int t, int n) TS_AVX512 {
    Tile<W, tr, nr>(x + static_cast<int64_t>(t) * K, w + n * row_bytes, row_bytes, K, N,
                    out + static_cast<int64_t>(t) * N + n);
  });
}

template <class W>
void RunAvx512(const float* x, const uint8_t* w, size_t row_bytes, int T, int K, int N,
               float* out, int threads) {
  ColumnChunks(T, K, N, threads, [&](int n0, int n1) {
    Columns<W>(x, w, row_bytes, T, K, N, n0, n1, out);
  });
}

// F16C is not asked for: the 512-bit vcvtph2ps is AVX-512F itself.
bool HaveAvx512() { return CpuHasAvx512(); }

}  // namespace

int LinearParts(int T, int K, int N, int threads) {
  // A hand-off costs a few microseconds; split only when each thread gets
  // at least ~64K multiply-adds and 16 columns.
  const int64_t work = static_cast<int64_t>(T) * K * N;
  int parts = static_cast<int>(std::min<int64_t>(threads, work / (1 << 16)));
  parts = std::min(parts, N / 16);
  return std::max(parts, 1);
}

void ColumnChunks(int T, int K, int N, int threads, const std::function<void(int, int)>& fn) {
  const int parts = LinearParts(T, K, N, threads);
  if (parts <= 1) {
    fn(0, N);
    return;
  }
  // Up to 4 chunks per thread (>= 32K multiply-adds each) so that a thread
  // the OS deschedules holds back little; ranges of 16 columns.
  const int64_t work = static_cast<int64_t>(T) * K * N;
  const int chunks = static_cast<int>(
      std::max<int64_t>(parts, std::min<int64_t>({4 * parts, work / (1 << 15), N / 16})));
  ParallelChunks(parts, chunks, [&](int c) {
    const int n0 = static_cast<int>(static_cast<int64_t>(N) * c / chunks) & ~15;
    const int n1 =
        c + 1 == chunks ? N : static_cast<int>(static_cast<int64_t>(N) * (c + 1) / chunks) & ~15;
    if (n0 < n1) fn(n0, n1);
  });
}

void LinearTypedPortable(const float* x, const void* w, DType wtype, int T, int K, int N,
                         float* out, int threads) {
  ColumnChunks(T, K, N, threads, [&](int n0, int n1) {
    std::vector<float> row(K);
    for (int n = n0; n < n1; ++n) {
      DecodeRow(wtype, w, n, K, row.data());
      for (int t = 0; t < T; ++t) {
        const float* xr = x + static_cast<int64_t>(t) * K;
        float acc[16] = {};
        for (int k = 0; k < K; ++k) acc[k & 15] += xr[k] * row[k];
        for (int h = 8; h >= 1; h /= 2) {
          for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
        }
        out[static_cast<int64_t>(t) * N + n] = acc[0];
      }
    }
  });
}

bool LinearTypedHasSimd(DType wtype) { return HaveAvx512(); }

void LinearTypedF32Fma(const float* x, const void* w, DType wtype, int T, int K, int N,
                       float* out, int threads) {
  if (T == 0 || N == 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t rb = DTypeBytes(wtype, K);
  switch (wtype) {
    case DType::kF32: RunAvx512<F32W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kF16: RunAvx512<F16W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kBF16: RunAvx512<BF16W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kQ8_0: RunAvx512<Q8_0W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kQ4_0: RunAvx512<Q4_0W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kQ4_1: RunAvx512<Q4_1W>(x, wb, rb, T, K, N, out, threads); break;
    case DType::kQ4_K: RunAvx512<Q4_KW>(x, wb, rb, T, K, N, out, threads); break;
    default: LinearTypedPortable(x, w, wtype, T, K, N, out, threads); break;
  }
}

void LinearTyped(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
                 int threads) {
  if (T == 0 || N == 0) return;
  if (wtype == DType::kF32 && !HaveAvx512()) {
    Linear(x, static_cast<const float*>(w), T, K, N, out, threads);  // AVX2 or portable
    return;
  }
  if (!HaveAvx512()) {
    if (LinearIntTakes(wtype) && LinearIntAvx2HasSimd()) {
      LinearIntAvx2(x, w, wtype, T, K, N, out, threads);  // linear_int_avx2.cc
    } else if (LinearTypedAvx2HasSimd()) {
      LinearTypedAvx2(x, w, wtype, T, K, N, out, threads);  // linear_typed_avx2.cc
    } else {
      LinearTypedPortable(x, w, wtype, T, K, N, out, threads);
    }
    return;
  }
  if (wtype == DType::kBF16 && LinearBf16HasSimd()) {
    LinearBf16(x, w, T, K, N, out, threads);  // linear_bf16.cc
    return;
  }
  if (LinearIntTakes(wtype) && LinearIntHasSimd()) {
    LinearInt(x, w, wtype, T, K, N, out, threads);  // linear_int.cc
    return;
  }
  if ((wtype == DType::kQ5_0 || wtype == DType::kQ5_1 || wtype == DType::kQ5_K ||
       wtype == DType::kQ6_K) &&
      LinearIntAvx2HasSimd()) {
    // AVX-512 without VNNI: the f32-FMA path has no Q5 or Q6_K decoder.
    LinearIntAvx2(x, w, wtype, T, K, N, out, threads);
    return;
  }
  LinearTypedF32Fma(x, w, wtype, T, K, N, out, threads);
}

}  // namespace treespec::cpu
