// exp(x) for x <= 0 in AVX-512, sixteen lanes at a time, shared by the
// kernels whose exponentials were scalar std::exp calls: attention's softmax
// (x = score − max), the Mamba scan's decay (x = dt·A with dt > 0, A < 0) and
// the MLP's SiLU (x = −|gate|).
//
// x = n·ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (ln2 split in a high
// and a low part so r keeps its low bits), exp(r) by Cephes' degree-5
// polynomial for expf, then multiplied by 2^n with vscalefps, which
// underflows to 0 for very negative x with no special cases. Relative error
// about 1e-7 (a float's rounding). Each lane's value depends only on its own
// input, so a kernel that uses it stays independent of batch and tile.
#pragma once

#include <immintrin.h>

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

inline bool HaveAvx512F() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return have;
}

}  // namespace treespec::cpu
