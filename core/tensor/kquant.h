// The scale / min packing of ggml's 256-element "K" blocks (Q4_K, Q5_K) and
// the Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1 block decoders, shared by the GGUF dequantiser
// (core/model/gguf_dequant.cc) and the CPU kernels that keep these weights
// quantised (kernels/cpu/quant_blocks.h, linear_typed.cc). Pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/tensor/dtype.h"

namespace treespec {

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block, from
// its 12 scale bytes `q`: the first four pairs are the low 6 bits of bytes
// 0..7; the last four take their low 4 bits from bytes 8..11 and their top 2
// bits from the spare top bits of bytes 0..7.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// out[0..255] = the 256 weights of the Q4_K block at `b` ([d f16][dmin f16]
// [12 scale bytes][128 code bytes]): sub-block j (32 elements) is
// d·sc_j·nibble − dmin·mn_j, its nibbles the low (j even) or high (j odd)
// halves of code bytes 32·(j / 2) .. + 31. With `five`, of the Q5_K block
// ([d][dmin][12 scale bytes][32 bytes qh][128 code bytes]): the same, with
// bit j of qh byte e the fifth bit (16) of sub-block j's element e.
inline void DequantizeKBlock(bool five, const uint8_t* b, float* out) {
  const float d = HalfAt(b), dmin = HalfAt(b + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    ScaleMinK4(j, b + 4, &sc, &mn);
    const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(mn);
    const uint8_t* q = b + (five ? 48 : 16) + 32 * (j / 2);
    for (int e = 0; e < 32; ++e) {
      int code = j % 2 == 0 ? q[e] & 0x0f : q[e] >> 4;
      if (five) code |= ((b[16 + e] >> j) & 1) << 4;
      out[32 * j + e] = scale * static_cast<float>(code) - min;
    }
  }
}
inline void DequantizeQ4KBlock(const uint8_t* b, float* out) { DequantizeKBlock(false, b, out); }
inline void DequantizeQ5KBlock(const uint8_t* b, float* out) { DequantizeKBlock(true, b, out); }

// out[0..255] = the 256 weights of the Q6_K block at `b` ([128 bytes ql][64
// bytes qh][16 int8 scales][d f16]): in half n (128 elements; its ql bytes
// 64n.., qh bytes 32n..) quarter q's element l (0..31) has the low 4 bits of
// ql byte l + 32·(q % 2) (low nibble for q < 2, high otherwise) and bits 2q,
// 2q + 1 of qh byte l as its top 2 bits; its weight is d·sc·(code − 32), sc
// the scale 8n + 2q + l / 16.
inline void DequantizeQ6KBlock(const uint8_t* b, float* out) {
  const float d = HalfAt(b + 208);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
    for (int q = 0; q < 4; ++q) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = ql[l + 32 * (q % 2)];
        const int code = (q < 2 ? byte & 0x0f : byte >> 4) | (((qh[l] >> (2 * q)) & 3) << 4);
        // ggml's order of operations: (d·sc)·(code − 32).
        out[128 * n + 32 * q + l] =
            d * static_cast<float>(sc[2 * q + l / 16]) * static_cast<float>(code - 32);
      }
    }
  }
}

// out[0..31] = the 32 weights of the Q5_0 block at `b` ([d f16][qh u32][16
// code bytes]: element j < 16 is the low nibble of byte j, j + 16 its high
// nibble, and bit j of qh is element j's fifth bit; weight d·(code − 16)) or
// of the Q5_1 block ([d f16][m f16][qh u32][16 code bytes]; d·code + m).
inline void DequantizeQ5Block(bool has_min, const uint8_t* b, float* out) {
  const float d = HalfAt(b), m = has_min ? HalfAt(b + 2) : 0.0f;
  uint32_t qh;
  std::memcpy(&qh, b + (has_min ? 4 : 2), 4);
  const uint8_t* qs = b + (has_min ? 8 : 6);
  const int offset = has_min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo - offset) + m;
    out[j + 16] = d * static_cast<float>(hi - offset) + m;
  }
}

}  // namespace treespec
