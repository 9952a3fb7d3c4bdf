#include "coordinator/release_queue.h"

#include <algorithm>

namespace treespec {

void ReleaseQueue::Add(const std::vector<uint64_t>& ids, Clock::time_point now) {
  for (uint64_t id : ids) entries_.push_back({id, 0, now});
}

std::vector<uint64_t> ReleaseQueue::TakeDue(Clock::time_point now) {
  std::vector<uint64_t> ids;
  if (!in_flight_.empty()) return ids;
  std::vector<Entry> later;
  for (const Entry& e : entries_) {
    if (e.due <= now) {
      in_flight_.push_back(e);
      ids.push_back(e.id);
    } else {
      later.push_back(e);
    }
  }
  entries_ = std::move(later);
  return ids;
}

std::chrono::milliseconds ReleaseQueue::Backoff(int attempts) const {
  std::chrono::milliseconds b = options_.initial_backoff;
  for (int i = 1; i < attempts && b < options_.max_backoff; ++i) b *= 2;
  return std::min(b, options_.max_backoff);
}

void ReleaseQueue::OnResult(bool ok, Clock::time_point now) {
  std::vector<Entry> batch = std::move(in_flight_);
  in_flight_.clear();
  if (ok) return;
  for (Entry& e : batch) {
    e.attempts += 1;
    if (e.attempts >= options_.max_attempts) {
      dropped_ += 1;
      continue;
    }
    e.due = now + Backoff(e.attempts);
    entries_.push_back(e);
  }
}

}  // namespace treespec
