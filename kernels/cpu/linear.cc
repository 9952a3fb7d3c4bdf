// Batch-invariant float32 matrix product out = x · wᵀ.
//
// OpenBLAS picks different code paths for different numbers of rows, so the
// same token computed alone and inside a batch differs in the last bits; that
// would let a greedy speculative run diverge from plain decoding on a near-tie.
// Here every output element is one dot product in a fixed order (eight partial
// sums over k ≡ j mod 8, a fixed reduction tree, then the scalar tail), whatever
// the tile it falls in, the number of rows or the thread. Register tiles of
// 4 rows × 3 weight rows (12 accumulators, 3 weight vectors and one of x: all
// 16 ymm registers) for prompts and trees; with 4 × 2 GCC folded each x load
// into the FMAs, loading it twice, and the tile was load-bound (in L1 on a
// Zen 4 core, 61 GFLOP/s against 4 × 3's 100; 1.1-2.0x at T = 13-64 with
// weights from L3, linear_bench --path avx2). Decode takes 1 × 2. Weights are
// walked once, in blocks that stay in L1 while every row of x passes over them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/simd_reduce.h"

namespace treespec::cpu {
namespace {

// ---- AVX2 + FMA path -------------------------------------------------------
template <int TR, int NR>
__attribute__((target("avx2,fma"), always_inline)) inline void TileAvx2(const float* x,
                                                                     const float* w, int K,
                                                                     int64_t ldo, float* out) {
  // Fully unrolled so the TR x NR accumulators stay in registers.
  __m256 acc[TR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8) {
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      // Rows are short; fetch the same part of the next tile's rows ahead of
      // the hardware prefetcher (one line per 16 floats).
      if ((k & 15) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(w + static_cast<int64_t>(j + NR) * K + k),
                     _MM_HINT_T0);
      }
      wv[j] = _mm256_loadu_ps(w + static_cast<int64_t>(j) * K + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + static_cast<int64_t>(i) * K + k);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float s = Reduce8(acc[i][j]);
      const float* xr = x + static_cast<int64_t>(i) * K;
      const float* wr = w + static_cast<int64_t>(j) * K;
      for (int k = K8; k < K; ++k) s = std::fma(xr[k], wr[k], s);
      out[i * ldo + j] = s;
    }
  }
}

__attribute__((target("avx2,fma"))) void LinearAvx2(const float* x, const float* w, int T,
                                                    int K, int N, int n0, int n1, float* out) {
  // Weight rows per block: about 16 KiB (a multiple of 3), so a block stays
  // in L1 while every row of x passes over it.
  const int rows = (16 << 10) / std::max(1, K * 4);
  const int kNB = std::max(3, rows - rows % 3);
  for (int nb = n0; nb < n1; nb += kNB) {
    const int ne = std::min(n1, nb + kNB);
    int t = 0;
    for (; t + 4 <= T; t += 4) {
      int n = nb;
      for (; n + 3 <= ne; n += 3) {
        TileAvx2<4, 3>(x + static_cast<int64_t>(t) * K, w + static_cast<int64_t>(n) * K, K, N,
                       out + static_cast<int64_t>(t) * N + n);
      }
      for (; n + 2 <= ne; n += 2) {
        TileAvx2<4, 2>(x + static_cast<int64_t>(t) * K, w + static_cast<int64_t>(n) * K, K, N,
                       out + static_cast<int64_t>(t) * N + n);
      }
      for (; n < ne; ++n) {
        TileAvx2<4, 1>(x + static_cast<int64_t>(t) * K, w + static_cast<int64_t>(n) * K, K, N,
                       out + static_cast<int64_t>(t) * N + n);
      }
    }
    for (; t < T; ++t) {
      int n = nb;
      for (; n + 2 <= ne; n += 2) {
        TileAvx2<1, 2>(x + static_cast<int64_t>(t) * K, w + static_cast<int64_t>(n) * K, K, N,
                       out + static_cast<int64_t>(t) * N + n);
      }
      for (; n < ne; ++n) {
        TileAvx2<1, 1>(x + static_cast<int64_t>(t) * K, w + static_cast<int64_t>(n) * K, K, N,
                       out + static_cast<int64_t>(t) * N + n);
      }
    }
  }
}

// ---- portable path (same invariance, no SIMD requirement) --------------------
void LinearPortable(const float* x, const float* w, int T, int K, int N, float* out,
                    int threads) {
  ColumnChunks(T, K, N, threads, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n) {
      const float* wr = w + static_cast<int64_t>(n) * K;
      for (int t = 0; t < T; ++t) {
        const float* xr = x + static_cast<int64_t>(t) * K;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int K8 = K & ~7;
        for (int k = 0; k < K8; k += 8) {
          for (int j = 0; j < 8; ++j) acc[j] += xr[k + j] * wr[k + j];
        }
        float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        for (int k = K8; k < K; ++k) s += xr[k] * wr[k];
        out[static_cast<int64_t>(t) * N + n] = s;
      }
    }
  });
}

bool HaveAvx2Fma() { return CpuHasAvx2Fma(); }

}  // namespace

void Linear(const float* x, const float* w, int T, int K, int N, float* out, int threads) {
  if (T == 0 || N == 0) return;
  if (HaveAvx2Fma()) {
    // Threads split the output columns (ranges of 16), never K, so the
    // thread count does not change any element's summation order.
    ColumnChunks(T, K, N, threads,
                 [&](int n0, int n1) { LinearAvx2(x, w, T, K, N, n0, n1, out); });
  } else {
    LinearPortable(x, w, T, K, N, out, threads);
  }
}

}  // namespace treespec::cpu
