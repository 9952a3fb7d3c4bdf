// ReleaseQueue: sequence ids waiting to be released on one worker or drafter,
// retried with exponential back-off when a Release fails, and dropped after
// `max_attempts` (the service's own leases free them in the end). Pure data
// with an injectable clock: the lane takes due batches, calls Release in the
// background and reports the outcome.
//
// Thread-compatible (the lane thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace treespec {

struct ReleaseQueueOptions {
  int max_attempts = 5;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
};

class ReleaseQueue {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ReleaseQueue(ReleaseQueueOptions options = {}) : options_(options) {}

  // Ids to release, due now.
  void Add(const std::vector<uint64_t>& ids, Clock::time_point now);
  // The ids due at `now`, now in flight (empty while a batch is in flight).
  std::vector<uint64_t> TakeDue(Clock::time_point now);
  // The outcome of the batch TakeDue returned.
  void OnResult(bool ok, Clock::time_point now);

  bool in_flight() const { return !in_flight_.empty(); }
  size_t pending() const { return entries_.size() + in_flight_.size(); }
  int64_t dropped() const { return dropped_; }  // ids given up after max_attempts

 private:
  struct Entry {
    uint64_t id;
    int attempts;
    Clock::time_point due;
  };
  std::chrono::milliseconds Backoff(int attempts) const;

  const ReleaseQueueOptions options_;
  std::vector<Entry> entries_;
  std::vector<Entry> in_flight_;
  int64_t dropped_ = 0;
};

}  // namespace treespec
