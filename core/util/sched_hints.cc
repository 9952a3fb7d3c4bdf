#include "core/util/sched_hints.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

#if defined(__linux__)
// The kernel's struct sched_attr (include/uapi/linux/sched/types.h), which
// glibc does not declare.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};
#endif

}  // namespace

absl::Status RequestShortSlices(absl::Duration slice) {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  SchedAttr attr;
  memset(&attr, 0, sizeof(attr));
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) {
    return absl::UnavailableError(absl::StrCat("sched_getattr: ", strerror(errno)));
  }
  if (attr.sched_policy != SCHED_OTHER) {
    return absl::FailedPreconditionError("the thread is not SCHED_OTHER; slice left alone");
  }
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  attr.sched_runtime = static_cast<uint64_t>(absl::ToInt64Nanoseconds(slice));
  if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) {
    return absl::UnavailableError(absl::StrCat("sched_setattr (slice ", absl::FormatDuration(slice),
                                               "): ", strerror(errno)));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("no slice hint on this OS");
#endif
}

}  // namespace treespec
