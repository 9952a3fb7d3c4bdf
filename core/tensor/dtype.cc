#include "core/tensor/dtype.h"

#include <cmath>

namespace treespec {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
    case DType::kQ6_K: return 0;
  }
  return 0;
}

bool IsQuantized(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_1 ||
         dtype == DType::kQ4_K || dtype == DType::kQ5_0 || dtype == DType::kQ5_1 ||
         dtype == DType::kQ5_K || dtype == DType::kQ6_K;
}

int64_t DTypeBlockSize(DType dtype) {
  if (dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K) return 256;
  return IsQuantized(dtype) ? 32 : 1;
}

size_t DTypeBytes(DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kQ8_0: return static_cast<size_t>(n / 32) * 34;
    case DType::kQ4_0: return static_cast<size_t>(n / 32) * 18;
    case DType::kQ4_1: return static_cast<size_t>(n / 32) * 20;
    case DType::kQ4_K: return static_cast<size_t>(n / 256) * 144;
    case DType::kQ5_0: return static_cast<size_t>(n / 32) * 22;
    case DType::kQ5_1: return static_cast<size_t>(n / 32) * 24;
    case DType::kQ5_K: return static_cast<size_t>(n / 256) * 176;
    case DType::kQ6_K: return static_cast<size_t>(n / 256) * 210;
    default: return static_cast<size_t>(n) * DTypeSize(dtype);
  }
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_0: return "q5_0";
    case DType::kQ5_1: return "q5_1";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
  }
  return "?";
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;          // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;         // overflow -> inf
  if (abs < 0x38800000u) {                              // subnormal or zero
    if (abs < 0x33000000u) return sign;                 // rounds to zero
    // value = mant * 2^(exp - 150); half subnormal unit is 2^-24.
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;                         // >= 14
    uint32_t result = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

void ConvertToF32(const void* src, DType src_dtype, size_t n, float* dst) {
  switch (src_dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * 4);  // an empty vector's data() may be null
      return;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(s[i]);
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) dst[i] = 0.0f;
  }
}

}  // namespace treespec
