// Coordinator: the public endpoint's logic without gRPC. Validates requests,
// admits them into a bounded queue, routes each to a (worker group, drafter
// replica) pair — least loaded healthy worker and replica; a sequence sticks
// to its pair — and owns the lanes that run the step loops. A background
// prober marks failed endpoints healthy again when they answer.
//
// Sequence ids start at a random 64-bit base per coordinator, so replicas
// sharing a worker or drafter never collide. A request without a seed gets a
// fresh random one (returned in its final chunk). Shutdown (or destruction)
// ends every queued and live request with UNAVAILABLE "server shutting down".
// Thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/endpoints.h"
#include "coordinator/lane.h"
#include "coordinator/request.h"
#include "coordinator/telemetry.h"
#include "coordinator/validate.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

struct CoordinatorOptions {
  std::string default_drafter;                // empty: the first drafter, or "none"
  std::string default_tree = "auto";          // shape or "auto" (planned per step)
  // The shapes "auto" chooses among. Deep chains are for drafters that are
  // rarely wrong: on the CPU demo pair at concurrency 1, chain:8 and chain:12
  // (6.6 and 8.6 tokens a step) beat every shallower shape by 10-25%, and
  // with them in the set auto went from 1.80x to 2.06x plain (mamba) and
  // 1.87x to 2.20x (transformer).
  std::string bandit_trees =
      "chain:1;chain:2;chain:3;chain:4;chain:6;chain:8;chain:12;2,1,1;2,2,1,1;3,2,2,1,1;3,3,2,1;"
      "2,2,2,2;4,2,1";
  int max_queue = 256;                        // waiting (not yet admitted) requests
  int max_batch = 64;                         // live sequences per lane
  int64_t max_tree_nodes = 64;                // must fit workers' and drafters' limits
  int32_t default_max_tokens = 128;
  std::chrono::milliseconds startup_timeout{60000};
  LaneOptions lane;                           // timeouts (shapes/tokenizer filled in)
  CoordinatorTelemetry* telemetry = nullptr;  // metrics and traces; not owned; null: none
  absl::Status Validate() const;
};

struct DrafterSpec {
  std::string name;
  std::unique_ptr<DrafterClient> client;
};

class Coordinator : public GaugeSource {
 public:
  // Takes the clients of every worker group and drafter replica.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options, std::vector<std::unique_ptr<WorkerClient>> workers,
      std::vector<DrafterSpec> drafters, std::unique_ptr<Tokenizer> tokenizer);
  ~Coordinator() override;

  // Waits (up to startup_timeout) for a worker to describe the model.
  absl::Status Start();

  // Validates and admits a request. INVALID_ARGUMENT / FAILED_PRECONDITION
  // for bad requests, RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // when no worker is healthy or the coordinator is shutting down.
  absl::StatusOr<std::shared_ptr<RequestState>> Submit(
      const v1::GenerateRequest& request, RequestState::Clock::time_point received,
      std::optional<RequestState::Clock::time_point> deadline, const SpanContext& trace = {});

  v1::ModelInfo ModelInfo() const;
  CoordinatorTelemetry* telemetry() const { return options_.telemetry; }
  const ValidationContext& validation() const { return ctx_; }
  // Step statistics summed over lanes (benchmarks).
  LaneStepStats TotalStats() const;
  int64_t NumWaiting() const override;
  int64_t NumLive() const override;
  std::vector<Health> WorkerHealth() const override;
  std::vector<Health> DrafterHealth() const override;
  // Refuses new requests and ends every queued and live one with UNAVAILABLE
  // "server shutting down"; returns once the lanes have stopped. Idempotent.
  void Shutdown();
  const std::vector<std::unique_ptr<WorkerEndpoint>>& workers() const { return workers_; }
  const std::vector<std::unique_ptr<DrafterEndpoint>>& drafters() const { return drafters_; }

 private:
  Coordinator() = default;
  Lane* LaneFor(int worker, int drafter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least loaded healthy worker group other than `except` (-1: none).
  int PickWorker(int except) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LaneOptions::reroute of lane (worker, drafter): re-submits `request` to
  // the least loaded other healthy group, with the same drafter replica.
  bool Reroute(const std::shared_ptr<RequestState>& request, int worker, int drafter);
  void ProbeLoop();

  CoordinatorOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<WorkerEndpoint>> workers_;
  std::vector<std::unique_ptr<DrafterEndpoint>> drafters_;
  ValidationContext ctx_;
  std::string model_name_;
  v1::WorkerInfo worker_info_;  // of the first worker that answered Start
  std::atomic<uint64_t> next_sequence_id_{0};  // random base (Create)

  mutable absl::Mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::BitGen rng_ ABSL_GUARDED_BY(mu_);  // seeds of requests without one
  std::thread prober_;
};

}  // namespace treespec
