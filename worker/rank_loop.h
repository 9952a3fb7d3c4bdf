// The rank loop of a tensor-parallel worker group (DESIGN.md "worker group").
//
// Rank 0 serves gRPC and runs a TargetRunner whose SequenceModel is a
// GroupLeader: every sequence operation is applied to the local model and
// appended to a StepLog (worker/step_log.h); every forward pass first broadcasts the log
// (ending with the pass itself) over the control communicator, then runs the
// local shard of the pass, whose collectives the other ranks join. The log is
// also flushed by heartbeat frames sent when rank 0 has been idle for
// heartbeat_interval, so a follower never waits longer than the collective
// timeout for its next frame. Verification and sampling run on rank 0 only.
//
// Ranks > 0 run RunFollower: receive a frame, replay its log on their shard
// (same model memory geometry, so the same handles and block ids), repeat, until rank 0 sends a
// shutdown frame or the group fails.
//
// Failure: a failed frame or collective on rank 0 fails the GroupHealth (which
// names the lost rank when the rendezvous reports one) and every later
// forward pass returns that UNAVAILABLE status without touching the group.
//
// Thread-safety: GroupLeader is thread-safe (its mutex orders frames and
// passes); RunFollower runs on one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/communicator.h"
#include "worker/group_health.h"
#include "worker/step_log.h"
#include "core/model/sequence_model.h"

namespace treespec {

struct GroupLeaderOptions {
  // Idle time after which rank 0 sends a heartbeat frame; must be well under
  // the followers' collective timeout.
  std::chrono::milliseconds heartbeat_interval{500};
  // How long a failed collective waits for the rendezvous to name the rank.
  std::chrono::milliseconds name_grace{std::chrono::seconds(5)};
};

class GroupLeader final : public SequenceModel {
 public:
  // `control` carries the frames; `data` is the model's communicator (the
  // same object on CPU); `local` is this rank's shard. None is owned; all
  // must outlive the leader.
  GroupLeader(Communicator* control, Communicator* data, SequenceModel* local,
              GroupHealth* health, GroupLeaderOptions options);
  ~GroupLeader() override;  // Shutdown()

  const ModelInfo& info() const override { return local_->info(); }
  absl::StatusOr<int64_t> Open(int64_t capacity) override;
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options = {}) override;
  absl::Status Commit(int64_t handle, int64_t n) override;
  absl::Status CommitPath(int64_t handle, const std::vector<int32_t>& path) override;
  void Release(int64_t handle) override;
  int64_t length(int64_t handle) const override;
  SequenceModelStats stats() const override;

  // Sends the shutdown frame (followers exit 0) and stops heartbeats; later
  // passes fail with UNAVAILABLE. Idempotent.
  void Shutdown();
  uint64_t frames_sent() const;

 private:
  absl::Status SendLocked(FrameKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GroupFailed(const absl::Status& cause);
  void HeartbeatLoop();

  Communicator* const control_;
  Communicator* const data_;
  SequenceModel* const local_;
  GroupHealth* const health_;
  const GroupLeaderOptions options_;

  mutable absl::Mutex mu_;
  StepLog log_ ABSL_GUARDED_BY(mu_);
  uint64_t frames_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_send_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeat_;
};

// Rank > 0: follows rank 0 until a shutdown frame (OK) or a failure (the
// error: rank 0 gone, a collective timed out, or a divergent log).
absl::Status RunFollower(Communicator* control, SequenceModel* model);

}  // namespace treespec
