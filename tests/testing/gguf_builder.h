// GgufBuilder: writes small GGUF images in memory for tests (the layout of
// core/util/gguf.h), including deliberately malformed ones. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace treespec::testing {

class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;  // dims[0] fastest
    uint32_t type = 0;
    std::string data;     // raw bytes
    int64_t offset = -1;  // -1: next aligned position
  };

  explicit GgufBuilder(uint32_t version = 3, uint32_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  // Raw KV: key, value type and the already encoded value bytes.
  GgufBuilder& Raw(const std::string& key, uint32_t type, const std::string& value) {
    kv_ += Str(key) + U32(type) + value;
    ++num_kv_;
    return *this;
  }
  GgufBuilder& U32Kv(const std::string& key, uint32_t v) { return Raw(key, 4, U32(v)); }
  GgufBuilder& I32Kv(const std::string& key, int32_t v) { return Raw(key, 5, Pod(v)); }
  GgufBuilder& F32Kv(const std::string& key, float v) { return Raw(key, 6, Pod(v)); }
  GgufBuilder& BoolKv(const std::string& key, bool v) { return Raw(key, 7, std::string(1, v)); }
  GgufBuilder& StrKv(const std::string& key, const std::string& v) { return Raw(key, 8, Str(v)); }
  GgufBuilder& StrArrayKv(const std::string& key, const std::vector<std::string>& v) {
    std::string b = U32(8) + U64(v.size());
    for (const auto& s : v) b += Str(s);
    return Raw(key, 9, b);
  }
  GgufBuilder& F32ArrayKv(const std::string& key, const std::vector<float>& v) {
    std::string b = U32(6) + U64(v.size());
    for (float x : v) b += Pod(x);
    return Raw(key, 9, b);
  }
  GgufBuilder& I32ArrayKv(const std::string& key, const std::vector<int32_t>& v) {
    std::string b = U32(5) + U64(v.size());
    for (int32_t x : v) b += Pod(x);
    return Raw(key, 9, b);
  }
  GgufBuilder& AddTensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  // F32 tensor with row-major `shape` = dims reversed.
  GgufBuilder& F32Tensor(const std::string& name, std::vector<uint64_t> dims,
                         const std::vector<float>& values) {
    Tensor t;
    t.name = name;
    t.dims = std::move(dims);
    t.type = 0;
    t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    return AddTensor(std::move(t));
  }

  std::string Build() const {
    std::string out = "GGUF" + U32(version_) + U64(tensors_.size()) + U64(num_kv_) + kv_;
    std::string data;
    std::vector<uint64_t> offsets;
    for (const Tensor& t : tensors_) {
      while (data.size() % alignment_ != 0) data.push_back('\0');
      offsets.push_back(t.offset >= 0 ? static_cast<uint64_t>(t.offset) : data.size());
      if (t.offset < 0) data += t.data;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      out += Str(t.name) + U32(t.dims.size());
      for (uint64_t d : t.dims) out += U64(d);
      out += U32(t.type) + U64(offsets[i]);
    }
    while (out.size() % alignment_ != 0) out.push_back('\0');
    return out + data;
  }

  template <typename T>
  static std::string Pod(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static std::string U32(uint32_t v) { return Pod(v); }
  static std::string U64(uint64_t v) { return Pod(v); }
  static std::string Str(const std::string& s) { return U64(s.size()) + s; }

 private:
  uint32_t version_;
  uint32_t alignment_;
  std::string kv_;
  uint64_t num_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace treespec::testing
