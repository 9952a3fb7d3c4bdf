// The 6-bit scales and mins of ggml's Q4_K / Q5_K blocks (core/tensor/kquant.h's
// ScaleMinK4) unpacked by SSSE3 byte shuffles, for the integer paths'
// decoders (linear_int.cc, linear_int_avx2.cc). Pure functions.
#pragma once

#include <immintrin.h>

namespace treespec::cpu {

// in: `head`, a block's first 16 bytes [d f16][dmin f16][12 packed bytes];
// out: bytes 0..7 the eight scales, 8..15 the eight mins. The low pairs:
// scales 0..3 = bytes 4..7, mins 0..3 = bytes 8..11 (& 63); the high: scales
// 4..7 = (bytes 12..15 & 15) | (bytes 4..7 >> 6) << 4, mins 4..7 =
// (bytes 12..15 >> 4) | (bytes 8..11 >> 6) << 4.
__attribute__((target("ssse3"))) inline __m128i UnpackKScales(__m128i head) {
  const __m128i lo6 = _mm_and_si128(
      _mm_shuffle_epi8(head,
                       _mm_setr_epi8(4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11, -1, -1, -1, -1)),
      _mm_set1_epi8(63));
  const __m128i nib = _mm_shuffle_epi8(
      head, _mm_setr_epi8(-1, -1, -1, -1, 12, 13, 14, 15, -1, -1, -1, -1, 12, 13, 14, 15));
  const __m128i nib_lo =
      _mm_and_si128(nib, _mm_setr_epi8(0, 0, 0, 0, 15, 15, 15, 15, 0, 0, 0, 0, 0, 0, 0, 0));
  const __m128i nib_hi = _mm_and_si128(
      _mm_srli_epi16(nib, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m128i top = _mm_and_si128(
      _mm_srli_epi16(_mm_shuffle_epi8(head, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1,
                                                            -1, 8, 9, 10, 11)),
                     2),
      _mm_set1_epi8(0x30));
  return _mm_or_si128(_mm_or_si128(lo6, nib_lo), _mm_or_si128(nib_hi, top));
}

}  // namespace treespec::cpu
