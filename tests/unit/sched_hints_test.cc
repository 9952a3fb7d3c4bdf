// Scheduling hints (core/util/sched_hints.h): the short slice a service asks
// for in main() reaches the threads it creates afterwards.
#include "core/util/sched_hints.h"

#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <thread>

#include "gtest/gtest.h"

namespace treespec {
namespace {

// The calling thread's sched_attr.sched_runtime (the fair-class slice on
// Linux 6.12+), or -1.
int64_t SliceNs() {
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
  } attr;
  memset(&attr, 0, sizeof(attr));
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) return -1;
  return static_cast<int64_t>(attr.runtime);
}

TEST(SchedHintsTest, ShortSliceReachesThreadsCreatedLater) {
  int64_t own = -1, child = -1;
  absl::Status st;
  // On a thread of its own, so the test runner's main thread keeps its slice.
  std::thread t([&] {
    st = RequestShortSlices(absl::Microseconds(100));
    own = SliceNs();
    std::thread inner([&] { child = SliceNs(); });
    inner.join();
  });
  t.join();
  if (!st.ok() || own != 100000) {
    GTEST_SKIP() << "this kernel keeps no fair-class slice hint (" << st << ", runtime " << own
                 << " ns)";
  }
  EXPECT_EQ(child, 100000) << "a thread created afterwards inherits the slice";
}

}  // namespace
}  // namespace treespec
