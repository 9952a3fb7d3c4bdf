// Horizontal sums of a vector register in one fixed order (halves, then
// pairs, then the last two lanes), shared by the kernels whose results must
// not depend on which kernel or tile computed them.
#pragma once

#include <immintrin.h>

namespace treespec::cpu {

// (0+4, 1+5, 2+6, 3+7), then (0+4+2+6, 1+5+3+7), then their sum.
__attribute__((target("avx2,fma"))) inline float Reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

// The 16 lanes: (i + i+8), then Reduce8's tree on the 8 sums.
__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline float Reduce16(__m512 v) {
  // Both halves by extractf32x8: GCC 12's castps512_ps256 and extractf64x4
  // pass an _mm256_undefined_pd that -Wuninitialized flags where inlined.
  const __m256 a = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  return Reduce8(a);
}

}  // namespace treespec::cpu
