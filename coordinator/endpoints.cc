#include "coordinator/endpoints.h"

#include <algorithm>

namespace treespec {

void EndpointHealth::MarkFailed(Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  if (healthy_.exchange(false)) backoff_ = std::chrono::milliseconds(250);
  retry_at_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(5000));
}

void EndpointHealth::MarkHealthy() {
  absl::MutexLock lock(&mu_);
  healthy_.store(true);
  backoff_ = std::chrono::milliseconds(250);
}

bool EndpointHealth::MayTry(Clock::time_point now) const {
  if (healthy_.load()) return true;
  absl::MutexLock lock(&mu_);
  return now >= retry_at_;
}

}  // namespace treespec
