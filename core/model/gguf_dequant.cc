#include "core/model/gguf_dequant.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/tensor/dtype.h"
#include "core/tensor/kquant.h"

namespace treespec {

void DequantizeQ8_0(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

void DequantizeQ4_0(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    out[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void DequantizeQ4_1(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  const float m = HalfAt(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    out[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void DequantizeQ5_0(const uint8_t* b, float* out) { DequantizeQ5Block(false, b, out); }
void DequantizeQ5_1(const uint8_t* b, float* out) { DequantizeQ5Block(true, b, out); }
void DequantizeQ4_K(const uint8_t* b, float* out) { DequantizeQ4KBlock(b, out); }

void DequantizeQ5_K(const uint8_t* b, float* out) { DequantizeQ5KBlock(b, out); }

void DequantizeQ6_K(const uint8_t* b, float* out) { DequantizeQ6KBlock(b, out); }

absl::Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t num_elems, float* dst) {
  size_t block_bytes = 0;
  int64_t block_elems = 0;
  if (!GgmlTypeLayout(static_cast<uint32_t>(type), &block_bytes, &block_elems)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", static_cast<uint32_t>(type), " cannot be dequantised"));
  }
  if (num_elems < 0 || num_elems % block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_elems, " elements is not a whole number of ",
                                                   GgmlTypeName(static_cast<uint32_t>(type)),
                                                   " blocks of ", block_elems));
  }
  const int64_t num_blocks = num_elems / block_elems;
  void (*kernel)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, num_elems * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
      ConvertToF32(src, DType::kF16, num_elems, dst);
      return absl::OkStatus();
    case GgmlType::kBF16:
      ConvertToF32(src, DType::kBF16, num_elems, dst);
      return absl::OkStatus();
    case GgmlType::kQ8_0:
      kernel = DequantizeQ8_0;
      break;
    case GgmlType::kQ4_0:
      kernel = DequantizeQ4_0;
      break;
    case GgmlType::kQ4_1:
      kernel = DequantizeQ4_1;
      break;
    case GgmlType::kQ5_0:
      kernel = DequantizeQ5_0;
      break;
    case GgmlType::kQ5_1:
      kernel = DequantizeQ5_1;
      break;
    case GgmlType::kQ4_K:
      kernel = DequantizeQ4_K;
      break;
    case GgmlType::kQ5_K:
      kernel = DequantizeQ5_K;
      break;
    case GgmlType::kQ6_K:
      kernel = DequantizeQ6_K;
      break;
  }
  for (int64_t i = 0; i < num_blocks; ++i) {
    kernel(src + i * block_bytes, dst + i * block_elems);
  }
  return absl::OkStatus();
}

}  // namespace treespec
