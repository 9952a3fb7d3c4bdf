// Tensor::Host: zero-initialised memory of every size, 2 MiB aligned from
// 2 MiB up, and (outside the sanitizer builds) large buffers committed only
// as they are touched, so that a worker's KV pool costs no memory until its
// blocks are used.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

bool AllZero(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// Pages of [p, p + bytes) resident in memory (mincore).
int64_t ResidentPages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  EXPECT_EQ(mincore(const_cast<void*>(p), bytes, v.data()), 0);
  int64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(HostTensorTest, EverySizeIsZeroedAndAligned) {
  for (int64_t n : {0, 1, 17, 1000, 524287, 524288, 524289, 3 << 20}) {
    SCOPED_TRACE(n);
    Tensor t = Tensor::Host(DType::kF32, {n});
    ASSERT_NE(t.raw(), nullptr);
    EXPECT_EQ(t.nbytes(), static_cast<size_t>(n) * 4);
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.raw());
    EXPECT_EQ(a % (t.nbytes() >= kHuge ? kHuge : 64), 0u);
    EXPECT_TRUE(AllZero(t));
    if (n > 0) {  // both ends writable
      static_cast<float*>(t.raw())[0] = 1.0f;
      static_cast<float*>(t.raw())[n - 1] = 2.0f;
      EXPECT_EQ(static_cast<float*>(t.raw())[n - 1], 2.0f);
    }
  }
}

TEST(HostTensorTest, ReallocatedLargeBuffersAreZeroAgain) {
  // A freed buffer's bytes must never show through a new one.
  for (int r = 0; r < 4; ++r) {
    Tensor t = Tensor::Host(DType::kF32, {1 << 20});
    ASSERT_TRUE(AllZero(t)) << "round " << r;
    std::memset(t.raw(), 0xAB, t.nbytes());
  }
}

TEST(HostTensorTest, ViewsKeepTheMemoryAlive) {
  Tensor view;
  {
    Tensor t = Tensor::Host(DType::kF32, {1 << 20});
    static_cast<float*>(t.raw())[(1 << 20) - 1] = 7.0f;
    view = t.Rows((1 << 20) - 1, 1 << 20);
  }
  EXPECT_EQ(static_cast<const float*>(view.raw())[0], 7.0f);
}

#ifndef TREESPEC_SANITIZER_BUILD
// (The sanitizer builds keep large buffers on the heap and zero them there,
// so that ASan's redzones guard them: every page is touched at once.)
TEST(HostTensorTest, LargeBuffersAreCommittedOnlyWhereTouched) {
  const int64_t n = int64_t{64} << 20;  // 64 MiB of bytes
  Tensor t = Tensor::Host(DType::kU8, {n});
  EXPECT_EQ(ResidentPages(t.raw(), t.nbytes()), 0)
      << "a fresh 64 MiB buffer was committed before use";
  // Touching the first 4 MiB commits at most those (a huge page at a time).
  std::memset(t.raw(), 1, 4 << 20);
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t resident = ResidentPages(t.raw(), t.nbytes());
  EXPECT_GE(resident, (4 << 20) / page);
  EXPECT_LE(resident, (6 << 20) / page);
}
#endif

}  // namespace
}  // namespace treespec
