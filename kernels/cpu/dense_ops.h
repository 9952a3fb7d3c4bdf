// Plain-loop float32 reference kernels for the dense ops (CPU backend).
// Row-major, contiguous. Each output row depends only on its own input row
// and the weights, computed in a fixed order, so results do not depend on how
// many rows are batched together (batch invariance, which makes tree logits
// equal sequential-decode logits bit for bit).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "core/tensor/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace treespec::cpu {

// in: ids [T], table [V, D]; out: out [T, D].
void Embedding(const int32_t* ids, int T, const float* table, int D, float* out);
// in: x [T, D], w [D]; out: out [T, D] (may alias x).
void RmsNorm(const float* x, const float* w, int T, int D, float eps, float* out);
// in: x [T, K], w [N, K]; out: out [T, N] = x · wᵀ. Up to `threads` OpenMP
// threads for large products (results do not depend on the thread count).
void Linear(const float* x, const float* w, int T, int K, int N, float* out, int threads = 1);
// in: x [T, K] f32, w [N, K] stored as `wtype` (f32, f16, bf16, q8_0, q4_0,
// q4_1, q4_k; linear_typed.cc); out: out [T, N] = x · wᵀ, batch-invariant like Linear.
// With AVX-512 VNNI, quantised weights take linear_int.cc's integer path,
// which rounds x to int16 per 32-element block first (without AVX-512, the
// same rounding on linear_int_avx2.cc's AVX2 integer path); with AVX-512 BF16, bf16
// weights take linear_bf16.cc's vdpbf16ps path (x split into two bf16 parts).
void LinearTyped(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
                 int threads = 1);
// The scalar path of LinearTyped (used where AVX-512 is missing; exposed for tests).
void LinearTypedPortable(const float* x, const void* w, DType wtype, int T, int K, int N,
                         float* out, int threads = 1);
// The AVX-512 path of LinearTyped that dequantises every weight type to f32 in
// registers (quantised weights on CPUs without VNNI; exposed for tests). Needs
// LinearTypedHasSimd().
void LinearTypedF32Fma(const float* x, const void* w, DType wtype, int T, int K, int N,
                       float* out, int threads = 1);
// Whether this CPU has LinearTypedF32Fma's AVX-512 (else LinearTyped takes
// the AVX2 path below where the CPU has it, or the portable one).
bool LinearTypedHasSimd(DType wtype);
// The f32-FMA path for CPUs with AVX2, FMA and F16C but not AVX-512
// (linear_typed_avx2.cc; exposed for tests and benchmarks, which may run it
// on an AVX-512 CPU too): every weight type decoded to f32, eight lanes.
// LinearTyped sends those CPUs' quantised weights to LinearIntAvx2 instead.
void LinearTypedAvx2(const float* x, const void* w, DType wtype, int T, int K, int N,
                     float* out, int threads);
bool LinearTypedAvx2HasSimd();
// How many threads (<= `threads`) a [T, K] x [N, K] product is split over.
int LinearParts(int T, int K, int N, int threads);
// Calls fn(n0, n1) for ranges of output columns covering [0, N) (starts at
// multiples of 16), over up to LinearParts threads (kernels/cpu/thread_pool.h).
void ColumnChunks(int T, int K, int N, int threads, const std::function<void(int, int)>& fn);
// in: b [N]; inout: x [T, N] += b per row.
void AddBias(float* x, const float* b, int T, int N);
// inout: x [T, W]; heads [h0, h0 + n) of Dh columns per row are RMS-normalised
// and scaled by w [Dh], in the same float order as RmsNorm.
void HeadRmsNorm(float* x, const float* w, int T, int W, int Dh, int h0, int n, float eps);
// out[i] = a[i] + b[i], n elements; may alias.
void Add(const float* a, const float* b, int64_t n, float* out);
// in: gu [T, 2F]; out: out [T, F] = silu(gu[:, :F]) * gu[:, F:].
void SiluMul(const float* gu, int T, int F, float* out);

// How far ahead of what they read the typed, integer and bf16 linear kernels
// prefetch their weight stream (one contiguous stream per thread; the
// hardware prefetcher alone reached about half the plain read bandwidth).
inline constexpr size_t kWeightPrefetchBytes = 16 << 10;

// The walk every typed linear path (linear_typed.cc, linear_typed_avx2.cc,
// linear_int.cc, linear_bf16.cc) takes over output columns [n0, n1) of a
// product with T activation rows: weight rows in blocks of about 24 KiB,
// which stay in L1 while every activation row passes over them; four
// activation rows against kCols weight rows per tile (then two, then one for
// the block's last columns); the last T % 4 rows one weight row at a time (a
// single sequential stream reads cold weights ~1.5x faster than several
// interleaved rows: decode, T = 1), or with kCols = 4 and T >= 4, four at a
// time (the block is in L1 by then; 5-8% at T = 13).
// kRows = 8: eight activation rows per tile first (then four), for weight
// types whose decoding costs as much as the products (the integer path's Q5
// types and K-quants), so that a decoded group serves twice the rows.
// kCols = 4: four weight rows against four activation rows, for kernels
// whose tiles load both operands as full vectors (the f32-FMA path's f32 and
// 16-bit weights): 8 loads per 16 FMAs where a 4 x 2 tile needs 6 per 8, and
// GCC folds the activation loads of a 4 x 2 tile into the FMAs, loading each
// twice. A Zen 4 core issues one 512-bit load a cycle, so that tile ran at
// under half the FMA peak (linear_bench, f32, demo shapes from L3: 1.0-1.4x
// faster with 4 at T = 13, 1.25-1.6x at 64).
// tile(tr, nr, t, n) computes out rows [t, t + TR) x columns [n, n + NR),
// TR and NR given as std::integral_constant, so that each kernel's generic
// lambda (carrying the kernel's target attribute) instantiates its own
// always-inline Tile<TR, NR>. `row_bytes`: one weight row's bytes. Call it
// from a function with the kernel's target and __attribute__((flatten)), so
// that the walk, the lambda and each tile become one function: with a call
// per tile the integer path ran 8-16% slower (linear_bench, T = 1 and 64).
template <int kRows = 4, int kCols = 2, class TileFn>
inline void WalkColumns(size_t row_bytes, int T, int n0, int n1, const TileFn& tile) {
  static_assert(kRows == 4 || kRows == 8);
  static_assert(kCols == 2 || kCols == 4);
  using Eight = std::integral_constant<int, 8>;
  using Four = std::integral_constant<int, 4>;
  using Two = std::integral_constant<int, 2>;
  using One = std::integral_constant<int, 1>;
  const int block_rows =
      std::max<int>(4, static_cast<int>((24 << 10) / std::max<size_t>(1, row_bytes)));
  for (int nb = n0; nb < n1; nb += block_rows) {
    const int ne = std::min(n1, nb + block_rows);
    int t = 0;
    if constexpr (kRows == 8) {
      for (; t + 8 <= T; t += 8) {
        int n = nb;
        for (; n + 2 <= ne; n += 2) tile(Eight{}, Two{}, t, n);
        for (; n < ne; ++n) tile(Eight{}, One{}, t, n);
      }
    }
    for (; t + 4 <= T; t += 4) {
      int n = nb;
      if constexpr (kCols == 4) {
        for (; n + 4 <= ne; n += 4) tile(Four{}, Four{}, t, n);
      }
      for (; n + 2 <= ne; n += 2) tile(Four{}, Two{}, t, n);
      for (; n < ne; ++n) tile(Four{}, One{}, t, n);
    }
    for (; t < T; ++t) {
      int n = nb;
      if constexpr (kCols == 4) {
        // The block is in L1 once four rows passed over it: no cold stream.
        if (T >= 4) {
          for (; n + 4 <= ne; n += 4) tile(One{}, Four{}, t, n);
        }
      }
      for (; n < ne; ++n) tile(One{}, One{}, t, n);
    }
  }
}

// A kernel's per-thread activation scratch after a call: a decode-sized
// buffer is kept for the next call, a long prompt's (over 4 MiB) is given back.
template <class T>
void TrimScratch(std::vector<T>* v) {
  if (v->size() * sizeof(T) > (size_t{4} << 20)) std::vector<T>().swap(*v);
}

// The integer paths' frame (linear_int.cc, linear_int_avx2.cc): each of the T
// activation rows rounded by round(t, rows + t * per_row) into the calling
// thread's scratch of X, a prompt's rows (8 or more) on every thread of the
// call, then columns(rows, n0, n1) over ColumnChunks. The scratch is passed
// on as a pointer: named inside a lambda a pool thread runs, a thread_local
// would be that thread's own (empty) one.
template <class X, class RoundFn, class ColumnsFn>
void RoundRowsThenColumns(int T, int K, int N, int per_row, int threads, const RoundFn& round,
                          const ColumnsFn& columns) {
  thread_local std::vector<X> scratch;
  scratch.resize(static_cast<size_t>(T) * per_row);
  X* rows = scratch.data();
  ParallelChunks(T >= 8 ? threads : 1, T,
                 [&](int t) { round(t, rows + static_cast<int64_t>(t) * per_row); });
  ColumnChunks(T, K, N, threads, [&](int n0, int n1) { columns(rows, n0, n1); });
  TrimScratch(&scratch);
}

}  // namespace treespec::cpu
