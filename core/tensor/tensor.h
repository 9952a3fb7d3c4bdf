// Tensor: a typed, shaped view of memory on one device (host or GPU).
//
// A Tensor shares ownership of its storage, so views (Rows, Reshape) keep the
// allocation alive. Tensors are always contiguous in row-major order. Copying a
// Tensor copies the view, not the data. Not thread-safe for concurrent writes
// to the same storage; concurrent reads are fine.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/tensor/dtype.h"

namespace treespec {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda = 1 };

using Shape = absl::InlinedVector<int64_t, 4>;

std::string ShapeString(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, DeviceKind device, std::shared_ptr<void> storage,
         void* data)
      : dtype_(dtype), device_(device), shape_(std::move(shape)),
        storage_(std::move(storage)), data_(data) {}

  // Allocates zero-initialised host memory (64-byte aligned).
  static Tensor Host(DType dtype, Shape shape);
  // Wraps host memory owned by `keep_alive` (for example a memory-mapped file).
  static Tensor HostView(DType dtype, Shape shape, const void* data,
                         std::shared_ptr<const void> keep_alive);

  bool defined() const { return data_ != nullptr || storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  DeviceKind device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const;
  size_t nbytes() const { return DTypeBytes(dtype_, numel()); }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const { return static_cast<T*>(data_); }

  // Rows [begin, end) along dimension 0; shares storage.
  Tensor Rows(int64_t begin, int64_t end) const;
  // Same data, new shape with the same element count.
  Tensor Reshape(Shape shape) const;
  // The first numel(shape) elements, viewed with `shape` (for reusing buffers).
  Tensor Prefix(Shape shape) const;

  std::string DebugString() const;

 private:
  DType dtype_ = DType::kF32;
  DeviceKind device_ = DeviceKind::kCpu;
  Shape shape_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

}  // namespace treespec
