// CommAccounting: what every real communicator keeps besides its transport —
// the sticky first failure (named with the rank, so a group's error says who
// broke) and the time spent per kind of collective. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/communicator.h"

namespace treespec {

enum class CollectiveOp { kAllReduce, kAllGather, kBroadcast, kBarrier };

class CommAccounting {
 public:
  CommAccounting(int rank, int size) : rank_(rank), size_(size) {}

  absl::Status status() const;
  CommStats stats() const;
  void ResetStats();
  // Makes `failure` the sticky status ("rank R of N: ...") unless one is set
  // already; returns the sticky status.
  absl::Status Fail(const absl::Status& failure);
  // Accounts a finished collective of `ns` nanoseconds over `bytes`. Returns
  // OK, or the sticky status when `result` failed.
  absl::Status Record(CollectiveOp op, size_t bytes, int64_t ns, const absl::Status& result);

 private:
  absl::Status FailLocked(const absl::Status& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_, size_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  CommStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
