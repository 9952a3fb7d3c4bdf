#include "core/comm/comm_accounting.h"

#include "absl/strings/str_cat.h"

namespace treespec {

absl::Status CommAccounting::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

CommStats CommAccounting::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CommAccounting::ResetStats() {
  absl::MutexLock lock(&mu_);
  stats_ = CommStats{};
}

absl::Status CommAccounting::FailLocked(const absl::Status& failure) {
  if (status_.ok()) {
    status_ = absl::Status(failure.code(),
                           absl::StrCat("rank ", rank_, " of ", size_, ": ", failure.message()));
  }
  return status_;
}

absl::Status CommAccounting::Fail(const absl::Status& failure) {
  absl::MutexLock lock(&mu_);
  return FailLocked(failure);
}

absl::Status CommAccounting::Record(CollectiveOp op, size_t bytes, int64_t ns,
                                    const absl::Status& result) {
  absl::MutexLock lock(&mu_);
  stats_.num_calls += 1;
  stats_.total_ns += ns;
  stats_.bytes += static_cast<int64_t>(bytes);
  if (op == CollectiveOp::kAllReduce) stats_.allreduce_ns += ns;
  if (op == CollectiveOp::kAllGather) stats_.allgather_ns += ns;
  if (op == CollectiveOp::kBroadcast) stats_.broadcast_ns += ns;
  return result.ok() ? result : FailLocked(result);
}

}  // namespace treespec
