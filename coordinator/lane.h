// Lane: the step loop of one (worker group, drafter replica) pair.
//
// All live sequences of the pair advance together: per step ONE Draft RPC and
// ONE Verify RPC for the whole batch (DESIGN.md "One speculative step"); new
// sequences join between steps (continuous batching) after a batched Open on
// the worker (prefill + first token) and on the drafter. Each step streams the
// new tokens, applies stop conditions, and frees finished, cancelled or
// expired sequences on both services before the next step.
//
// Failures: if the drafter fails or is unreachable, its sequences verify
// root-only trees (plain decoding) and are re-opened on the drafter once it
// answers again — the client only sees slower tokens. If the worker fails,
// the lane's sequences end with UNAVAILABLE naming the worker; other lanes are
// untouched. A lane runs on its own thread; Add is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/tokenizer/tokenizer.h"
#include "core/spec/bandit.h"
#include "core/spec/stop.h"
#include "coordinator/endpoints.h"
#include "coordinator/request.h"
#include "coordinator/telemetry.h"

namespace treespec {

struct LaneOptions {
  std::chrono::milliseconds open_timeout{120000};
  std::chrono::milliseconds verify_timeout{60000};
  std::chrono::milliseconds draft_timeout{5000};
  int max_batch = 64;
  std::vector<TreeShape> bandit_shapes;  // arms for speculation.tree = "auto"
  BanditOptions bandit;
  const Tokenizer* tokenizer = nullptr;  // for text deltas; null: ids only
  std::atomic<uint64_t>* next_sequence_id = nullptr;
  CoordinatorTelemetry* telemetry = nullptr;  // not owned; null: no metrics or traces
};

// Per-step accounting the lane reports (for benchmarks and metrics).
struct LaneStepStats {
  int64_t steps = 0;
  int64_t draft_ns = 0;      // wall time of Draft RPCs
  int64_t verify_ns = 0;     // wall time of Verify RPCs
  int64_t worker_forward_ns = 0;
  int64_t drafter_reported_ns = 0;
  int64_t loop_ns = 0;       // whole step loop iterations with live sequences
};

class Lane {
 public:
  Lane(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneOptions options);
  ~Lane();

  void Add(std::shared_ptr<RequestState> request);
  // Live plus waiting sequences.
  int64_t load() const;
  // Requests added but not yet admitted (opened on the worker).
  int64_t waiting() const;
  WorkerEndpoint* worker() const { return worker_; }
  DrafterEndpoint* drafter() const { return drafter_; }
  LaneStepStats stats() const;

 private:
  struct Seq;
  void Run();
  void Admit(std::vector<std::shared_ptr<RequestState>> arrivals);
  void ReopenDrafts();
  void Step();
  void Emit(Seq* seq, const std::vector<int32_t>& new_tokens);
  void FinishSeq(Seq* seq, absl::Status status);
  void Reap();

  WorkerEndpoint* const worker_;
  DrafterEndpoint* const drafter_;
  const LaneOptions options_;

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<RequestState>> arrivals_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t live_count_ ABSL_GUARDED_BY(mu_) = 0;
  LaneStepStats stats_ ABSL_GUARDED_BY(mu_);

  // Owned by the lane thread.
  std::vector<std::unique_ptr<Seq>> live_;
  std::thread thread_;
};

}  // namespace treespec
