// GroupHealth: rank 0's view of whether its tensor-parallel group still
// works. It fails once, for good: when the rendezvous server reports a rank
// lost (its session closed or went silent), or when a collective fails. The
// failure is UNAVAILABLE with a message naming the rank when one is known;
// rank 0 then reports NOT_SERVING and fails every RPC with it.
//
// Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace treespec {

class GroupHealth {
 public:
  explicit GroupHealth(int size) : size_(size) {}

  // Rank `rank` is gone for `reason` (from the rendezvous server's thread).
  void RankLost(int rank, const std::string& reason);
  // A collective failed with `cause`. A dead peer usually shows up as a lost
  // rank at about the same time, so this waits up to `grace` for one to be
  // named before failing the group without a name. Returns the group status.
  absl::Status CollectiveFailed(const absl::Status& cause, absl::Duration grace);

  // OK, or UNAVAILABLE saying why the group is down.
  absl::Status status() const;
  bool ok() const { return status().ok(); }
  // Called once when the group fails (immediately if it already has).
  void OnFailure(std::function<void(const absl::Status&)> callback);

 private:
  using Callbacks = std::vector<std::function<void(const absl::Status&)>>;
  // Sets the failure; returns the callbacks to run once the lock is released.
  Callbacks Fail(absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int size_;
  mutable absl::Mutex mu_;
  int lost_rank_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  Callbacks callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
