// DeviceAllocator: a caching allocator for one GPU's memory.
//
// Blocks come from cudaMalloc in size classes (powers of two up to 1 MiB,
// then whole MiBs) and go back to a per-class free list when the last Tensor
// sharing them dies, so a forward pass that allocates its small per-step
// tensors (ids, positions, plans, scratch) costs a lock and a map lookup,
// not a cudaMalloc (which also synchronises the device). Reuse is safe
// without events because every user enqueues on the one stream of its
// backend: work issued after the reuse is ordered after work issued before
// the release. When cudaMalloc fails, the cache is returned to the driver and
// the allocation retried once; RESOURCE_EXHAUSTED after that.
//
// Thread-safe (released blocks may arrive from any thread). Held through a
// shared_ptr that every block's deleter keeps, so blocks may outlive the
// backend that allocated them.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace treespec::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  struct Stats {
    size_t in_use_bytes = 0;
    size_t peak_in_use_bytes = 0;  // the most in use at once since ResetPeak
    size_t cached_bytes = 0;
    int64_t num_mallocs = 0;
  };

  static std::shared_ptr<DeviceAllocator> Create(int device);
  ~DeviceAllocator();

  // At least `bytes` (256-byte aligned) of uninitialised device memory; the
  // deleter returns the block to the cache.
  absl::StatusOr<std::shared_ptr<void>> Allocate(size_t bytes);
  // Returns every cached block to the driver (cudaFree synchronises).
  void ReleaseCached();
  Stats stats() const;
  // peak_in_use_bytes = in_use_bytes.
  void ResetPeak();

  static size_t SizeClass(size_t bytes);

 private:
  explicit DeviceAllocator(int device) : device_(device) {}
  void Release(void* p, size_t size);

  const int device_;
  mutable absl::Mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec::cuda
