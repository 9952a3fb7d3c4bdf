// Safetensors files (https://huggingface.co/docs/safetensors) and Hugging Face
// checkpoint directories (model.safetensors or a sharded
// model.safetensors.index.json), memory-mapped.
//
// Every defect gives a Status naming the file and the tensor or field:
// truncated file or data (DATA_LOSS), corrupt or oversized JSON header,
// overlapping or out-of-range offsets, unknown dtype (INVALID_ARGUMENT),
// missing tensor (NOT_FOUND), wrong shape (INVALID_ARGUMENT), tensors the model
// never used (INVALID_ARGUMENT from CheckAllUsed). Never crashes.
//
// Thread-compatible: Find marks tensors as used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "core/util/mapped_file.h"

namespace treespec {

struct TensorInfo {
  std::string name;
  std::string file;  // path of the shard holding it
  DType dtype = DType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
  std::shared_ptr<const void> mapping;  // keeps `data` alive (a MappedFile or a buffer)
};

// Largest JSON header accepted (the format's own reference limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // Parses an in-memory image of `size` bytes that `owner` keeps alive (the
  // tensors share it); `path` names it in errors.
  static absl::StatusOr<SafetensorsFile> Parse(std::shared_ptr<const void> owner,
                                               const uint8_t* bytes, size_t size,
                                               const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
};

// A host view of part of a tensor: rows [r0, r1) and columns [c0, c1) of a 2-D
// tensor (1-D tensors: rows only), in the file's dtype.
struct HostSlice {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;         // either into the mapping or into `owned`
  std::vector<uint8_t> owned;
  std::shared_ptr<const void> mapping;
};

class Checkpoint {
 public:
  // Opens <dir>/model.safetensors, or every shard named by
  // <dir>/model.safetensors.index.json.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);
  // A checkpoint over tensors another reader prepared (e.g. dequantised GGUF);
  // `origin` names it in errors.
  static std::unique_ptr<Checkpoint> FromTensors(std::string origin,
                                                 std::map<std::string, TensorInfo> tensors);

  // The tensor `name`, checked against `expected` shape; marks it used.
  absl::StatusOr<const TensorInfo*> Find(const std::string& name, const Shape& expected);
  bool Contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Rows [r0, r1), columns [c0, c1) of tensor `name` (checked against `expected`).
  absl::StatusOr<HostSlice> Slice(const std::string& name, const Shape& expected, int64_t r0,
                                  int64_t r1, int64_t c0, int64_t c1);
  // INVALID_ARGUMENT naming the first tensor no Find/Slice asked for.
  absl::Status CheckAllUsed() const;
  // Marks tensors that a model knowingly ignores (e.g. rotary_emb.inv_freq).
  void Ignore(const std::string& name) { used_.insert(name); }

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, TensorInfo> tensors_;
  std::set<std::string> used_;
};

absl::StatusOr<DType> ParseSafetensorsDType(const std::string& s);

}  // namespace treespec
