#include "kernels/cuda/device_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace treespec::cuda {

std::shared_ptr<DeviceAllocator> DeviceAllocator::Create(int device) {
  return std::shared_ptr<DeviceAllocator>(new DeviceAllocator(device));
}

DeviceAllocator::~DeviceAllocator() { ReleaseCached(); }

size_t DeviceAllocator::SizeClass(size_t bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes <= 256) return 256;
  if (bytes <= kMiB) {
    size_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

absl::StatusOr<std::shared_ptr<void>> DeviceAllocator::Allocate(size_t bytes) {
  const size_t size = SizeClass(bytes);
  void* p = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
    }
  }
  if (p == nullptr) {
    cudaSetDevice(device_);
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ReleaseCached();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      Stats s = stats();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda:", device_, ": cannot allocate ", size, " bytes (", cudaGetErrorString(err),
          "); in use ", s.in_use_bytes, ", device free ", free_bytes, " of ", total_bytes));
    }
    absl::MutexLock lock(&mu_);
    ++stats_.num_mallocs;
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.in_use_bytes += size;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  }
  std::shared_ptr<DeviceAllocator> self = shared_from_this();
  return std::shared_ptr<void>(p, [self, size](void* q) { self->Release(q, size); });
}

void DeviceAllocator::Release(void* p, size_t size) {
  absl::MutexLock lock(&mu_);
  free_[size].push_back(p);
  stats_.in_use_bytes -= size;
  stats_.cached_bytes += size;
}

void DeviceAllocator::ReleaseCached() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    absl::MutexLock lock(&mu_);
    blocks.swap(free_);
    stats_.cached_bytes = 0;
  }
  if (blocks.empty()) return;
  int current = -1;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  for (auto& [size, list] : blocks) {
    for (void* p : list) cudaFree(p);
  }
  if (current >= 0) cudaSetDevice(current);
}

DeviceAllocator::Stats DeviceAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DeviceAllocator::ResetPeak() {
  absl::MutexLock lock(&mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

}  // namespace treespec::cuda
