// Periodic: runs a function every `period` on its own thread until
// destroyed (e.g. the services' lease sweepers). Thread-safe.
#pragma once

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace treespec {

class Periodic {
 public:
  Periodic(absl::Duration period, std::function<void()> fn)
      : period_(period), fn_(std::move(fn)), thread_([this] { Loop(); }) {}
  ~Periodic() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

 private:
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period_)) {
      mu_.Unlock();
      fn_();
      mu_.Lock();
    }
  }

  const absl::Duration period_;
  const std::function<void()> fn_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace treespec
