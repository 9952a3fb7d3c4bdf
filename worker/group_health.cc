#include "worker/group_health.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace treespec {

void GroupHealth::RankLost(int rank, const std::string& reason) {
  Callbacks run;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (lost_rank_ >= 0) return;
    lost_rank_ = rank;
    if (!status_.ok()) return;
    failed = absl::UnavailableError(
        absl::StrCat("tensor-parallel group is down: rank ", rank, " of ", size_, " ", reason));
    run = Fail(failed);
  }
  for (auto& cb : run) cb(failed);
}

absl::Status GroupHealth::CollectiveFailed(const absl::Status& cause, absl::Duration grace) {
  Callbacks run;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    auto named = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return lost_rank_ >= 0; };
    mu_.AwaitWithTimeout(absl::Condition(&named), grace);
    if (!status_.ok()) return status_;
    failed = absl::UnavailableError(absl::StrCat(
        "tensor-parallel group is down: a collective failed and no rank was reported lost within ",
        absl::FormatDuration(grace), ": ", cause.message()));
    run = Fail(failed);
  }
  for (auto& cb : run) cb(failed);
  return failed;
}

absl::Status GroupHealth::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void GroupHealth::OnFailure(std::function<void(const absl::Status&)> callback) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    failed = status_;
  }
  callback(failed);
}

GroupHealth::Callbacks GroupHealth::Fail(absl::Status st) {
  status_ = std::move(st);
  Callbacks run;
  run.swap(callbacks_);
  return run;
}

}  // namespace treespec
