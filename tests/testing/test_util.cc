#include "tests/testing/test_util.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace treespec::testing {

std::string SourceDir() { return TREESPEC_SOURCE_DIR; }
std::string BinaryDir() { return TREESPEC_BINARY_DIR; }
std::string SharedModels() {
  const char* env = std::getenv("TREESPEC_SHARED_MODELS");
  return env != nullptr ? env : TREESPEC_SHARED_MODELS;
}
bool HaveSharedModels() {
  return std::filesystem::exists(SharedModels() + "/stories260K/stories260K.bin");
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "treespec_test_XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* p = mkdtemp(buf.data());
  EXPECT_NE(p, nullptr);
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

TestTensor F32Tensor(Shape shape, const std::vector<float>& values) {
  TestTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

void WriteSafetensors(const std::string& path, const std::map<std::string, TestTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const char* dt = t.dtype == DType::kF32 ? "F32" : t.dtype == DType::kF16 ? "F16" : "BF16";
    header[name] = {{"dtype", dt},
                    {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), h.size());
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace treespec::testing
