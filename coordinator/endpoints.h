// Worker groups and drafter replicas as the coordinator sees them: a client,
// a health flag with retry back-off, a load counter (live sequences), and the
// start-up cost profile the endpoint reported (WorkerInfo.verify_cost,
// DrafterInfo.draft_cost), which new lanes install in their planner.
// Thread-safe (atomics and mutexes).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/clients.h"
#include "core/spec/step_cost_model.h"

namespace treespec {

class EndpointHealth {
 public:
  using Clock = std::chrono::steady_clock;
  bool healthy() const { return healthy_.load(); }
  // A failed call: unhealthy, next retry after an exponential back-off.
  void MarkFailed(Clock::time_point now);
  void MarkHealthy();
  // Whether a caller may try the endpoint now (healthy, or back-off over).
  bool MayTry(Clock::time_point now) const;
  int64_t load() const { return load_.load(); }
  void AddLoad(int64_t delta) { load_.fetch_add(delta); }

 private:
  std::atomic<bool> healthy_{true};
  std::atomic<int64_t> load_{0};
  mutable absl::Mutex mu_;
  Clock::time_point retry_at_ ABSL_GUARDED_BY(mu_);
  std::chrono::milliseconds backoff_ ABSL_GUARDED_BY(mu_){250};
};

// A cost model reported by an endpoint; empty until it reported one.
template <typename Model>
class ProfileSlot {
 public:
  void Set(Model m) {
    absl::MutexLock lock(&mu_);
    model_ = std::move(m);
  }
  std::optional<Model> Get() const {
    absl::MutexLock lock(&mu_);
    return model_;
  }

 private:
  mutable absl::Mutex mu_;
  std::optional<Model> model_ ABSL_GUARDED_BY(mu_);
};

struct WorkerEndpoint {
  std::string name;  // address
  std::unique_ptr<WorkerClient> client;
  EndpointHealth health;
  ProfileSlot<VerifyCostModel> verify_profile;
};

struct DrafterEndpoint {
  std::string name;  // drafter name (several replicas may share it)
  std::unique_ptr<DrafterClient> client;
  EndpointHealth health;
  ProfileSlot<DraftCostModel> draft_profile;
  // Set once the prober refused it (it does not fit the workers' model), so
  // that the refusal is logged once.
  std::atomic<bool> refused{false};

  // The target layers whose features the drafter reads (its
  // DrafterInfoResponse.feature_layers; empty: none or not known yet).
  std::vector<int32_t> feature_layers() const {
    absl::MutexLock lock(&mu);
    return feature_layers_;
  }
  // Its kind ("mamba", "eagle", ...; empty until it answered an Info call).
  std::string kind() const {
    absl::MutexLock lock(&mu);
    return kind_;
  }
  // Draft-ahead: the most candidates it gives per sequence (0: none, or not
  // known yet) and the largest step it drafts them for (0: any); its
  // DrafterInfoResponse.max_ahead_candidates / max_ahead_batch.
  int32_t max_ahead_candidates() const { return max_ahead_candidates_.load(); }
  int64_t max_ahead_batch() const { return max_ahead_batch_.load(); }
  // From the drafter's Info answer.
  void SetInfo(const v1::DrafterInfoResponse& info) {
    absl::MutexLock lock(&mu);
    kind_ = info.kind();
    feature_layers_.assign(info.feature_layers().begin(), info.feature_layers().end());
    max_ahead_candidates_.store(info.max_ahead_candidates());
    max_ahead_batch_.store(info.max_ahead_batch());
  }

 private:
  mutable absl::Mutex mu;
  std::string kind_ ABSL_GUARDED_BY(mu);
  std::vector<int32_t> feature_layers_ ABSL_GUARDED_BY(mu);
  std::atomic<int32_t> max_ahead_candidates_{0};
  std::atomic<int64_t> max_ahead_batch_{0};
};

}  // namespace treespec
