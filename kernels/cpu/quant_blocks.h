// Scalar decoders of weight rows stored as f16, bf16 or ggml's quantised
// blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 of 32 elements, Q4_K, Q5_K and Q6_K of 256; layouts in
// core/model/gguf_dequant.h),
// shared by the CPU backend's embedding lookup, the portable linear path and
// the tests. Each gives exactly the float ggml's dequantisation gives.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/tensor/dtype.h"
#include "core/tensor/kquant.h"

namespace treespec::cpu {

// out[0 .. DTypeBlockSize(type)) = the weights of the block at `b`.
inline void DecodeBlock(DType type, const uint8_t* b, float* out) {
  if (type == DType::kQ4_K) {
    DequantizeQ4KBlock(b, out);  // core/tensor/kquant.h
  } else if (type == DType::kQ5_K) {
    DequantizeQ5KBlock(b, out);  // core/tensor/kquant.h
  } else if (type == DType::kQ6_K) {
    DequantizeQ6KBlock(b, out);  // core/tensor/kquant.h
  } else if (type == DType::kQ5_0 || type == DType::kQ5_1) {
    DequantizeQ5Block(type == DType::kQ5_1, b, out);  // core/tensor/kquant.h
  } else if (type == DType::kQ8_0) {
    const float d = HalfAt(b);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  } else if (type == DType::kQ4_0) {
    const float d = HalfAt(b);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>((b[2 + j] & 0x0f) - 8);
      out[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
    }
  } else {  // kQ4_1
    const float d = HalfAt(b), m = HalfAt(b + 2);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>(b[4 + j] & 0x0f) + m;
      out[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
    }
  }
}

// Whether blocks of `type` convert to Q8_0 exactly (ToQ8_0Block): Q4_0 and
// Q5_0, whose weights are d·(code − offset) with |code − offset| ≤ 16, and
// Q8_0 itself.
inline bool ConvertsToQ8_0(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ5_0 || type == DType::kQ8_0;
}

// The Q4_0 / Q5_0 / Q8_0 block at `b` as a Q8_0 block (34 bytes at `out`):
// the same f16 d and codes − offset, so DecodeBlock gives the same floats.
inline void ToQ8_0Block(DType type, const uint8_t* b, uint8_t* out) {
  std::memcpy(out, b, 2);
  int8_t* q = reinterpret_cast<int8_t*>(out + 2);
  if (type == DType::kQ8_0) {
    std::memcpy(q, b + 2, 32);
    return;
  }
  const bool five = type == DType::kQ5_0;
  uint32_t qh = 0;
  if (five) std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + (five ? 6 : 2);
  const int offset = five ? 16 : 8;
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - offset);
    q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
  }
}

// out[0..K) = row `r` of a [*, K] weight matrix `w` of dtype `type` (f32, f16,
// bf16 or quantised).
inline void DecodeRow(DType type, const void* w, int64_t r, int K, float* out) {
  const uint8_t* row = static_cast<const uint8_t*>(w) + DTypeBytes(type, r * K);
  if (type == DType::kF32) {
    std::memcpy(out, row, sizeof(float) * K);
  } else if (type == DType::kF16 || type == DType::kBF16) {
    ConvertToF32(row, type, K, out);
  } else {
    const int bs = static_cast<int>(DTypeBlockSize(type));
    const size_t bb = DTypeBytes(type, bs);
    for (int k = 0; k < K; k += bs) DecodeBlock(type, row + (k / bs) * bb, out + k);
  }
}

}  // namespace treespec::cpu
