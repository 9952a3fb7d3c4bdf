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

}  // namespace treespec::cpu
