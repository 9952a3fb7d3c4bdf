#include "coordinator/request.h"

namespace treespec {

void RequestState::Push(v1::GenerateResponse chunk) {
  absl::MutexLock lock(&mu_);
  chunks_.push_back(std::move(chunk));
}

void RequestState::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  status_ = std::move(status);
}

bool RequestState::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

bool RequestState::Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done,
                       absl::Status* status) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !chunks_.empty() || finished_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  *done = false;
  if (!chunks_.empty()) {
    *chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return true;
  }
  if (finished_) {
    *done = true;
    *status = status_;
  }
  return false;
}

}  // namespace treespec
