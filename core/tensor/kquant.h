// The scale / min packing of ggml's 256-element "K" blocks (Q4_K, Q5_K),
// shared by the GGUF dequantiser (core/model/gguf_dequant.cc) and the CPU
// kernels that keep Q4_K weights quantised (kernels/cpu/quant_blocks.h,
// linear_int.cc). Pure functions.
#pragma once

#include <cstdint>

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

}  // namespace treespec
