// Lane: the step loop of one (worker group, drafter replica) pair.
//
// All live sequences of the pair advance together: per step ONE Draft RPC and
// ONE Verify RPC for the whole batch (DESIGN.md "One speculative step"). The
// loop itself is a proto-free state machine (step_machine.h); the lane runs
// it on its own thread and moves its plans over the wire (lane_rpc.h).
//
// Admission never stalls live streams: a new request's worker Open (prefill
// and first token) and drafter Open run in parallel on a small task pool, off
// the step thread; the sequence streams its first token when the worker Open
// returns and joins the steps between two steps once both Opens returned. Releases run on the pool as well and are retried with
// back-off when they fail (release_queue.h).
//
// Failures: if the drafter fails or is unreachable, its sequences verify
// root-only trees (plain decoding) and are re-opened on the drafter once it
// answers again — the client only sees slower tokens. A malformed drafted
// tree is a drafter error and a plain step, never the client's fault. If the
// worker fails, the lane's sequences end with UNAVAILABLE naming the worker;
// other lanes are untouched. Requests that streamed nothing yet (their worker
// Open found the group down) go to another group instead (LaneOptions::reroute).
//
// Shutdown (or destruction) ends every queued, opening and live request with
// UNAVAILABLE "server shutting down". Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/spec/bandit.h"
#include "core/tokenizer/tokenizer.h"
#include "coordinator/endpoints.h"
#include "coordinator/lane_rpc.h"
#include "coordinator/release_queue.h"
#include "coordinator/request.h"
#include "coordinator/step_machine.h"
#include "coordinator/task_pool.h"
#include "coordinator/telemetry.h"

namespace treespec {

struct LaneOptions {
  std::chrono::milliseconds open_timeout{120000};
  std::chrono::milliseconds verify_timeout{60000};
  std::chrono::milliseconds draft_timeout{5000};
  std::chrono::milliseconds release_timeout{5000};
  int max_batch = 64;                    // live plus opening sequences
  std::vector<TreeShape> bandit_shapes;  // candidate shapes for speculation.tree = "auto"
  BanditOptions bandit;
  bool plan_auto = true;  // StepMachineOptions::plan_auto (false: per-sequence UCB bandit)
  const Tokenizer* tokenizer = nullptr;  // for text deltas; null: ids only
  // Sequence ids; required. The coordinator starts it at a random 64-bit
  // base so that replicas sharing a worker never collide.
  std::atomic<uint64_t>* next_sequence_id = nullptr;
  CoordinatorTelemetry* telemetry = nullptr;  // not owned; null: no metrics or traces
  int64_t vocab_size = 0;      // drafted trees are checked against it (0: not checked)
  int64_t max_tree_nodes = 0;  // and against this size (0: no limit)
  ReleaseQueueOptions release_retry;
  int num_rpc_threads = 4;  // the pool for Opens and Releases
  // Draft-ahead (step_machine.h): candidates per sequence asked beside each
  // Verify, at most the drafter's max_ahead_candidates and only in steps of
  // at most its max_ahead_batch drafted sequences; 0: off.
  int32_t draft_ahead = 2;
  bool draft_ahead_sampled = false;  // StepMachineOptions::draft_ahead_sampled
  // StepMachineOptions::reroute: hands a request whose worker Open found the
  // group down to another group (the coordinator's); null: it fails.
  std::function<bool(const std::shared_ptr<RequestState>&)> reroute;
};

// Per-step accounting the lane reports (for benchmarks and metrics).
struct LaneStepStats {
  int64_t steps = 0;
  int64_t draft_ns = 0;      // wall time of Draft RPCs
  int64_t verify_ns = 0;     // wall time of Verify RPCs
  int64_t worker_forward_ns = 0;
  int64_t drafter_reported_ns = 0;
  int64_t worker_handler_ns = 0;   // the worker's whole Verify handler
  int64_t loop_ns = 0;       // whole step loop iterations with live sequences
  // CPU time of the lane thread in those iterations (its gRPC client work
  // included, not gRPC's own threads): the coordinator's CPU cost of the
  // steps, whatever the load.
  int64_t loop_cpu_ns = 0;
  // Draft-ahead calls beside the Verify: their number, wall time, and the
  // time steps waited for them after their Verify returned.
  int64_t ahead_calls = 0;
  int64_t ahead_ns = 0;
  int64_t ahead_wait_ns = 0;
};

class Lane {
 public:
  Lane(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneOptions options);
  ~Lane();  // Shutdown()

  // After Shutdown, the request ends at once with UNAVAILABLE.
  void Add(std::shared_ptr<RequestState> request);
  // Ends every queued and live request with UNAVAILABLE "server shutting
  // down", releases what the lane holds and stops its thread. Idempotent.
  void Shutdown();
  // Live plus waiting sequences.
  int64_t load() const;
  // Requests not yet stepping: queued, or with their worker Open in flight.
  // Requests their client cancelled, and ended ones, do not count although
  // the lane thread has not reaped them yet (it may be inside a step): the
  // admission queue's limit is not taken up by requests nobody waits for.
  int64_t waiting() const;
  WorkerEndpoint* worker() const { return worker_; }
  DrafterEndpoint* drafter() const { return drafter_; }
  LaneStepStats stats() const;
  // Release ids given up after every retry failed (worker plus drafter).
  int64_t releases_dropped() const;

 private:
  void Run();
  void Iterate();
  void Admit(std::vector<std::shared_ptr<RequestState>> arrivals);
  void OpenDrafts(std::vector<DrafterOpenItem> items, std::vector<SeqTelemetry> tel);
  void Step();
  // Draft-ahead beside the Verify: waits for the call `StartAhead` sent and
  // hands its answer to the machine.
  void FinishAhead(std::unique_ptr<LaneRpc::AheadCall> call, size_t batch);
  void SendCatchUps();
  void Reap();
  void PumpReleases(bool final);
  void Post(std::function<void()> fn);  // runs `fn` on the lane thread
  void RunMailbox();
  void EndRemaining();
  void Publish();

  WorkerEndpoint* const worker_;
  DrafterEndpoint* const drafter_;
  const LaneOptions options_;

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<RequestState>> arrivals_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> mailbox_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the lane thread has ended everything
  int64_t live_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t opening_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<RequestState>> opening_ ABSL_GUARDED_BY(mu_);
  int64_t releases_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  LaneStepStats stats_ ABSL_GUARDED_BY(mu_);

  // Owned by the lane thread.
  StepMachine machine_;
  LaneRpc rpc_;
  ReleaseQueue worker_releases_, drafter_releases_;
  std::thread thread_;
  TaskPool pool_;  // destroyed first: its tasks use the members above
};

}  // namespace treespec
