// exp(x) for x <= 0 in AVX-512, sixteen lanes at a time, shared by the
// kernels whose exponentials were scalar std::exp calls: attention's softmax
// (x = score − max), the Mamba scan's decay (x = dt·A with dt > 0, A < 0) and
// the MLP's SiLU (x = −|gate|); with a log1p, also the scan's step sizes
// (softplus).
//
// x = n·ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (ln2 split in a high
// and a low part so r keeps its low bits), exp(r) by Cephes' degree-5
// polynomial for expf, then multiplied by 2^n with vscalefps, which
// underflows to 0 for very negative x with no special cases. Relative error
// about 1e-7 (a float's rounding). Each lane's value depends only on its own
// input, so a kernel that uses it stays independent of batch and tile.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/cpu_features.h"

namespace treespec::cpu {

__attribute__((target("avx512f"))) inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

// x·sigmoid(x) for any x, from e = exp(−|x|) <= 1: sigmoid is 1/(1+e) for
// x >= 0 and e/(1+e) below (no overflow either way).
__attribute__((target("avx512f"))) inline __m512 Silu(__m512 x) {
  const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 num = _mm512_mask_blend_ps(neg, one, e);
  return _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(one, e)));
}

// log1p(y) for y in [0, 1]: u = 1 + y as m·2^k with m in [√½, √2],
// log m = 2·atanh(s), s = (m − 1)/(m + 1), |s| <= 0.1716, by its series to
// s^9 (truncation below 3e-9 relative), then scaled by y / (u − 1), which
// undoes the rounding of 1 + y (Goldberg's log1p; u − 1 is exact), with
// log1p(y) = y where 1 + y rounds to 1.
__attribute__((target("avx512f"))) inline __m512 Log1pUnit(__m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 u = _mm512_add_ps(one, y);
  const __mmask16 big = _mm512_cmp_ps_mask(u, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
  const __m512 m = _mm512_mask_mul_ps(u, big, u, _mm512_set1_ps(0.5f));
  const __m512 s = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one));
  const __m512 s2 = _mm512_mul_ps(s, s);
  __m512 p = _mm512_set1_ps(1.0f / 9.0f);
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 7.0f));
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 5.0f));
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 3.0f));
  p = _mm512_fmadd_ps(p, s2, one);
  __m512 log_u = _mm512_mul_ps(_mm512_add_ps(s, s), p);
  log_u = _mm512_mask_add_ps(log_u, big, log_u, _mm512_set1_ps(0.693147181f));
  const __m512 um1 = _mm512_sub_ps(u, one);
  const __mmask16 exact = _mm512_cmp_ps_mask(um1, _mm512_setzero_ps(), _CMP_EQ_OQ);
  const __m512 ratio = _mm512_div_ps(y, _mm512_mask_blend_ps(exact, um1, one));
  const __m512 scaled = _mm512_mul_ps(log_u, ratio);
  return _mm512_mask_blend_ps(exact, scaled, y);
}

// torch.nn.functional.softplus (beta 1, threshold 20): x above 20, else
// log1p(exp(x)) = max(x, 0) + log1p(exp(−|x|)).
__attribute__((target("avx512f"))) inline __m512 Softplus(__m512 x) {
  const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 sp = _mm512_add_ps(_mm512_max_ps(x, _mm512_setzero_ps()), Log1pUnit(e));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ), sp, x);
}

inline bool HaveAvx512F() {
  static const bool have = CpuIsaAllowsAvx512() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512dq");
  return have;
}

}  // namespace treespec::cpu
