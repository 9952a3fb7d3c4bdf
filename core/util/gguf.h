// GgufFile: a memory-mapped GGUF file (the llama.cpp / ggml container, versions
// 2 and 3): the header, the typed key/value metadata and the tensor directory.
//
// Layout (all little-endian): "GGUF", u32 version, u64 tensor_count,
// u64 kv_count; kv_count × (string key, u32 value type, value); tensor_count ×
// (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset);
// padding to `general.alignment` (default 32); the tensor data, each tensor at
// data_start + offset. A string is u64 length + bytes; an array is u32 element
// type + u64 count + elements. dims[0] is the fastest-varying (column) axis, so
// the row-major shape is the dims reversed.
//
// Open validates everything against the file size before anything is read:
// counts, string lengths, array lengths, dims (overflow-checked), types,
// offsets (aligned, in range, not overlapping). Errors are DATA_LOSS for a
// truncated file and INVALID_ARGUMENT for a malformed one, naming the path,
// the byte offset and the field. Immutable after Open; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "core/util/mapped_file.h"

namespace treespec {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufValueTypeName(GgufValueType t);
// The eight integer types (uint8 ... int64).
bool GgufIsIntType(GgufValueType t);

// One metadata value. Scalars keep their declared type; arrays hold one
// element type (nested arrays are rejected: no llama-family key uses them).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType elem_type = GgufValueType::kUint8;  // kArray only
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  // kArray: exactly one of these is filled, by element kind.
  std::vector<int64_t> ints;         // all integer element types (u64 above 2^63 rejected)
  std::vector<double> floats;        // kFloat32 / kFloat64
  std::vector<std::string> strings;  // kString
  std::vector<bool> bools;           // kBool

  bool is_array() const { return type == GgufValueType::kArray; }
  size_t array_size() const;
};

// ggml tensor types that treespec can read (others are refused by name/number).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // as stored: dims[0] fastest
  Shape shape;                // row-major: dims reversed
  int64_t numel = 0;
  uint64_t offset = 0;  // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

class GgufFile {
 public:
  static absl::StatusOr<std::shared_ptr<const GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (tests); `path` names it in errors.
  static absl::StatusOr<std::shared_ptr<const GgufFile>> Parse(std::shared_ptr<const void> owner,
                                                               const uint8_t* data, size_t size,
                                                               const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(const std::string& name) const;
  const GgufValue* Find(const std::string& key) const;
  // Keeps the bytes alive (share with tensors viewing them).
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // Typed access: INVALID_ARGUMENT naming the key if present with another type,
  // NOT_FOUND if absent (the *Or forms return `def` instead).
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<int64_t> GetIntOr(const std::string& key, int64_t def) const;
  absl::StatusOr<double> GetFloatOr(const std::string& key, double def) const;
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<bool> GetBoolOr(const std::string& key, bool def) const;
  // An array of the given kind: ints, floats or strings.
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(const std::string& key) const;
  absl::StatusOr<const std::vector<double>*> GetFloatArray(const std::string& key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetIntArray(const std::string& key) const;

 private:
  std::string path_;
  std::shared_ptr<const void> owner_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

// Bytes per block and elements per block of `type`; false if unknown.
bool GgmlTypeLayout(uint32_t type, size_t* block_bytes, int64_t* block_elems);
const char* GgmlTypeName(uint32_t type);

}  // namespace treespec
