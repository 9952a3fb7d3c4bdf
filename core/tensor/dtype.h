// Element types and the float16 / bfloat16 <-> float32 conversions used when
// loading checkpoints. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>


namespace treespec {

// kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1 (32 elements per block), kQ4_K, kQ5_K and
// kQ6_K (256) are ggml's
// block-quantised layouts (core/model/gguf_dequant.h), kept quantised in
// memory as CPU weight matrices (kernels/cpu/quant_blocks.h); a tensor of them
// holds whole blocks along its last dimension.
enum class DType : uint8_t {
  kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5, kQ8_0 = 6, kQ4_0 = 7, kQ4_1 = 8,
  kQ4_K = 9, kQ5_0 = 10, kQ5_1 = 11, kQ6_K = 12, kQ5_K = 13
};

// Bytes per element of a plain dtype; 0 for the block-quantised ones (use DTypeBytes).
size_t DTypeSize(DType dtype);
// Elements per block: 32 for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1, 256 for Q4_K / Q5_K / Q6_K, 1
// otherwise.
int64_t DTypeBlockSize(DType dtype);
// Bytes of `n` elements (for quantised dtypes n is a multiple of the block size).
size_t DTypeBytes(DType dtype, int64_t n);
bool IsQuantized(DType dtype);
const char* DTypeName(DType dtype);

inline float BF16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t FloatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// The f16 stored (little-endian, any alignment) at `p`, e.g. a quantised
// block's scale.
inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// Converts `n` elements of `src` (f32, f16 or bf16) into float32.
void ConvertToF32(const void* src, DType src_dtype, size_t n, float* dst);

}  // namespace treespec
