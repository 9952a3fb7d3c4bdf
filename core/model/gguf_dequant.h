// Dequantisation of ggml tensor data to float32, one row-major run of whole
// blocks at a time. Block layouts follow ggml's definitions (ggml-common.h):
//   F32 / F16 / BF16   plain elements
//   Q8_0  (32 elems, 34 B):  f16 d, i8 q[32];             x = d·q
//   Q4_0  (32 elems, 18 B):  f16 d, u8 qs[16];            x = d·(nibble − 8)
//   Q4_1  (32 elems, 20 B):  f16 d, f16 m, u8 qs[16];     x = d·nibble + m
//         (element j < 16 is the low nibble of qs[j], element j + 16 the high)
//   Q5_0  (32 elems, 22 B):  f16 d, u32 qh, u8 qs[16];    x = d·(5-bit q − 16)
//   Q5_1  (32 elems, 24 B):  f16 d, f16 m, u32 qh, u8 qs[16];  x = d·q + m
//         (Q4's nibbles, with bit j of qh the fifth bit of element j)
//   Q4_K (256 elems, 144 B): f16 d, f16 dmin, u8 scales[12] (8 six-bit scale /
//         min pairs), u8 qs[128];    x = d·sc·nibble − dmin·mn per 32 elements
//   Q5_K (256 elems, 176 B): as Q4_K plus u8 qh[32] giving each value a 5th bit
//   Q6_K (256 elems, 210 B): u8 ql[128], u8 qh[64], i8 scales[16], f16 d;
//         x = d·scale·(6-bit q − 32) per 16 elements
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "core/util/gguf.h"

namespace treespec {

// Dequantises `num_elems` elements (a multiple of the type's block size) from
// `src` into `dst`. INVALID_ARGUMENT for an unknown type or a partial block.
absl::Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t num_elems, float* dst);

// The per-block kernels, exposed for tests.
void DequantizeQ8_0(const uint8_t* block, float* out);  // 32 floats
void DequantizeQ4_0(const uint8_t* block, float* out);  // 32 floats
void DequantizeQ4_1(const uint8_t* block, float* out);  // 32 floats
void DequantizeQ5_0(const uint8_t* block, float* out);  // 32 floats
void DequantizeQ5_1(const uint8_t* block, float* out);  // 32 floats
void DequantizeQ4_K(const uint8_t* block, float* out);  // 256 floats
void DequantizeQ5_K(const uint8_t* block, float* out);  // 256 floats
void DequantizeQ6_K(const uint8_t* block, float* out);  // 256 floats

}  // namespace treespec
