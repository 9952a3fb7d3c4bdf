#include "core/tensor/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/status_macros.h"

namespace treespec {

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::Host(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = DTypeBytes(dtype, n);
  // Large buffers (weights, KV pools) get 2 MiB alignment and transparent
  // huge pages where the kernel grants them on request (THP "madvise"): a
  // decode step streams every weight, and 4 KiB pages would miss the TLB on
  // most of them.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  size_t alloc = (bytes + align - 1) / align * align;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(align, alloc);
  TS_CHECK(p != nullptr);
  if (align == kHuge) madvise(p, alloc, MADV_HUGEPAGE);  // advice only; failure is harmless
  std::memset(p, 0, alloc);
  std::shared_ptr<void> storage(p, [](void* q) { std::free(q); });
  return Tensor(dtype, std::move(shape), DeviceKind::kCpu, storage, p);
}

Tensor Tensor::HostView(DType dtype, Shape shape, const void* data,
                        std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<void> storage = std::const_pointer_cast<void>(keep_alive);
  return Tensor(dtype, std::move(shape), DeviceKind::kCpu, std::move(storage),
                const_cast<void*>(data));
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  TS_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0]);
  int64_t row = 1;
  for (int i = 1; i < rank(); ++i) row *= shape_[i];
  Shape s = shape_;
  s[0] = end - begin;
  char* base = static_cast<char*>(data_) + DTypeBytes(dtype_, begin * row);
  return Tensor(dtype_, std::move(s), device_, storage_, base);
}

Tensor Tensor::Reshape(Shape shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TS_CHECK(n == numel());
  return Tensor(dtype_, std::move(shape), device_, storage_, data_);
}

Tensor Tensor::Prefix(Shape shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TS_CHECK(n <= numel());
  return Tensor(dtype_, std::move(shape), device_, storage_, data_);
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeString(shape_),
                      device_ == DeviceKind::kCpu ? "@cpu" : "@cuda");
}

}  // namespace treespec
