#include "core/tensor/tensor.h"

#include <sys/mman.h>

#include <cstdint>
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
  // most of them. They are anonymous mappings of their own, which the kernel
  // hands out zeroed and commits page by page on first touch: no memset, so
  // a KV pool costs neither time nor memory until its blocks are used. (The
  // worker's default pool, 65536 tokens of the demo target, is 512 MiB: its
  // memset took 1-2 s of CPU at every start and kept all of it resident.)
  // The sanitizer builds keep them on the heap, where ASan's redzones catch
  // an overflow past the end.
  constexpr size_t kHuge = size_t{2} << 20;
#ifdef TREESPEC_SANITIZER_BUILD
  const size_t align = bytes >= kHuge ? kHuge : 64;
#else
  const size_t align = 64;
  if (bytes >= kHuge) {
    const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
    // Over-map by one huge page, then unmap what lies outside the aligned span.
    void* m = mmap(nullptr, alloc + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    TS_CHECK(m != MAP_FAILED);
    const uintptr_t base = reinterpret_cast<uintptr_t>(m);
    const uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
    if (aligned > base) munmap(m, aligned - base);
    if (const size_t tail = base + kHuge - aligned; tail > 0) {
      munmap(reinterpret_cast<void*>(aligned + alloc), tail);
    }
    void* p = reinterpret_cast<void*>(aligned);
    madvise(p, alloc, MADV_HUGEPAGE);  // advice only; failure is harmless
    std::shared_ptr<void> storage(p, [alloc](void* q) { munmap(q, alloc); });
    return Tensor(dtype, std::move(shape), DeviceKind::kCpu, storage, p);
  }
#endif
  const size_t alloc = bytes == 0 ? align : (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, alloc);
  TS_CHECK(p != nullptr);
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
