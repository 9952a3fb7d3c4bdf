// Helpers shared by treespec tests: paths, temporary directories, and writing
// small safetensors checkpoints from tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"

namespace treespec::testing {

std::string SourceDir();    // repository root
std::string BinaryDir();    // build directory
std::string SharedModels(); // ../shared/models (may not exist)
bool HaveSharedModels();

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct TestTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;  // raw little-endian element bytes
};
TestTensor F32Tensor(Shape shape, const std::vector<float>& values);
// Writes a safetensors file with the given tensors (in name order).
void WriteSafetensors(const std::string& path, const std::map<std::string, TestTensor>& tensors);
void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

}  // namespace treespec::testing
