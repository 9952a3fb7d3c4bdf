// Minimal NumPy .npy (format 1.0) reading and writing for float32 / int32
// arrays in C order. Used by treespec-logits and by golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace treespec {

struct NpyArray {
  std::string dtype;             // "<f4" or "<i4"
  std::vector<int64_t> shape;
  std::vector<float> f32;        // filled when dtype == "<f4"
  std::vector<int32_t> i32;      // filled when dtype == "<i4"
  int64_t numel() const;
};

absl::StatusOr<NpyArray> ReadNpy(const std::string& path);
absl::Status WriteNpyF32(const std::string& path, const float* data,
                         const std::vector<int64_t>& shape);

}  // namespace treespec
