// Mamba's selective scan (Gu & Dao 2023, Alg. 2) for one sequence on the CPU.
//
// Per token l and channel c: h = exp(dt·A[c]) ∘ h + (dt·u)·B[l],
// y = C[l]·h + D[c]·u, gated by silu(z). With AVX-512 and a state size that
// is a multiple of 16 (Mamba's N is 16) the N states of a channel are a
// vector: the decays exp(dt·A) (dt > 0 and A < 0, so the argument is never
// positive) come from simd_exp.h's polynomial instead of N scalar std::exp
// calls, which were most of a small Mamba drafter's time per tree node, and
// C·h is a fixed 16-lane reduction; sixteen channels at a time take their
// step sizes (softplus) and gates (silu) from simd_exp.h's vector versions
// (three scalar libm calls per channel were a third of the scan: the demo
// Mamba drafter's cost per tree node fell from 28 to 20 us with this and
// the conv's vector silu). Both paths give each (token, channel) the same
// operations whatever the batch or tree around it, so a tree node still
// equals the token decoded on its own.
#include <cmath>

#include "kernels/cpu/mamba_ops.h"
#include "kernels/cpu/simd_exp.h"
#include "kernels/cpu/simd_reduce.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512
// intrinsic headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace treespec::cpu {
namespace {

inline float SiluScalar(float z) { return z / (1.0f + std::exp(-z)); }

// One channel's N states for one token: h = exp(dt·a) ∘ h + du·b, returns
// C·h summed in Reduce16's fixed order.
__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline float ChannelAvx512(
    float dt, float du, const float* a, const float* bl, const float* cl, int N, float* h) {
  const __m512 vdt = _mm512_set1_ps(dt), vdu = _mm512_set1_ps(du);
  __m512 acc = _mm512_setzero_ps();
  for (int n = 0; n < N; n += 16) {
    const __m512 decay = ExpNonPositive(_mm512_mul_ps(vdt, _mm512_loadu_ps(a + n)));
    const __m512 hn = _mm512_fmadd_ps(decay, _mm512_loadu_ps(h + n),
                                      _mm512_mul_ps(vdu, _mm512_loadu_ps(bl + n)));
    _mm512_storeu_ps(h + n, hn);
    acc = _mm512_fmadd_ps(hn, _mm512_loadu_ps(cl + n), acc);
  }
  return Reduce16(acc);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) void ScanAvx512(
    const float* u, const float* delta, const float* dt_bias, const float* A, const float* Bm,
    const float* Cm, const float* D, const float* z, int L, int C, int N, float* state,
    float* y) {
  for (int l = 0; l < L; ++l) {
    const float* bl = Bm + static_cast<int64_t>(l) * N;
    const float* cl = Cm + static_cast<int64_t>(l) * N;
    const int64_t row = static_cast<int64_t>(l) * C;
    int c = 0;
    // Sixteen channels at a time: their step sizes dt = softplus(delta +
    // bias), dt·u and gates silu(z) as vectors (three scalar libm calls per
    // channel before), then each channel's states.
    for (; c + 16 <= C; c += 16) {
      alignas(64) float dt[16], du[16], gate[16];
      const __m512 vdt = Softplus(
          _mm512_add_ps(_mm512_loadu_ps(delta + row + c), _mm512_loadu_ps(dt_bias + c)));
      _mm512_store_ps(dt, vdt);
      _mm512_store_ps(du, _mm512_mul_ps(vdt, _mm512_loadu_ps(u + row + c)));
      _mm512_store_ps(gate, Silu(_mm512_loadu_ps(z + row + c)));
      for (int j = 0; j < 16; ++j) {
        const int64_t ch = c + j;
        const float ch_y = ChannelAvx512(dt[j], du[j], A + ch * N, bl, cl, N, state + ch * N);
        y[row + ch] = (ch_y + D[ch] * u[row + ch]) * gate[j];
      }
    }
    for (; c < C; ++c) {
      const float dt = Softplus(delta[row + c] + dt_bias[c]);
      const float ch_y = ChannelAvx512(dt, dt * u[row + c], A + static_cast<int64_t>(c) * N, bl,
                                       cl, N, state + static_cast<int64_t>(c) * N);
      y[row + c] = (ch_y + D[c] * u[row + c]) * SiluScalar(z[row + c]);
    }
  }
}

}  // namespace

// Matches torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void MambaScan(const float* u, const float* delta, const float* dt_bias, const float* A,
               const float* Bm, const float* Cm, const float* D, const float* z, int L, int C,
               int N, float* state, float* y) {
  if (N % 16 == 0 && HaveAvx512F()) {
    ScanAvx512(u, delta, dt_bias, A, Bm, Cm, D, z, L, C, N, state, y);
    return;
  }
  for (int l = 0; l < L; ++l) {
    const float* bl = Bm + static_cast<int64_t>(l) * N;
    const float* cl = Cm + static_cast<int64_t>(l) * N;
    for (int c = 0; c < C; ++c) {
      int64_t lc = static_cast<int64_t>(l) * C + c;
      float dt = Softplus(delta[lc] + dt_bias[c]);
      float uu = u[lc];
      float* h = state + static_cast<int64_t>(c) * N;
      const float* a = A + static_cast<int64_t>(c) * N;
      float acc = 0.0f;
      for (int n = 0; n < N; ++n) {
        h[n] = std::exp(dt * a[n]) * h[n] + (dt * bl[n]) * uu;
        acc += h[n] * cl[n];
      }
      acc += D[c] * u[lc];
      y[lc] = acc * SiluScalar(z[lc]);
    }
  }
}

}  // namespace treespec::cpu
