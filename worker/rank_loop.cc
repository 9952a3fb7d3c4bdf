#include "worker/rank_loop.h"

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

using Clock = std::chrono::steady_clock;

GroupLeader::GroupLeader(Communicator* control, Communicator* data, SequenceModel* local,
                         GroupHealth* health, GroupLeaderOptions options)
    : control_(control),
      data_(data),
      local_(local),
      health_(health),
      options_(options),
      last_send_(Clock::now()) {
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

GroupLeader::~GroupLeader() { Shutdown(); }

absl::StatusOr<int64_t> GroupLeader::Open(int64_t capacity) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> handle = local_->Open(capacity);
  log_.Open(handle.ok() ? *handle : -1, capacity, handle.ok());
  return handle;
}

absl::Status GroupLeader::Commit(int64_t kv, int64_t n) {
  absl::MutexLock lock(&mu_);
  absl::Status st = local_->Commit(kv, n);
  log_.Commit(kv, n, st.ok());
  return st;
}

absl::Status GroupLeader::CommitPath(int64_t kv, const std::vector<int32_t>& path) {
  absl::MutexLock lock(&mu_);
  absl::Status st = local_->CommitPath(kv, path);
  log_.CommitPath(kv, path, st.ok());
  return st;
}

void GroupLeader::Release(int64_t kv) {
  absl::MutexLock lock(&mu_);
  local_->Release(kv);
  log_.Release(kv);
}

absl::Status GroupLeader::Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                                  const ForwardOptions& options) {
  absl::MutexLock lock(&mu_);
  TS_RETURN_IF_ERROR(health_->status());
  if (stopping_) return absl::UnavailableError("worker group is shutting down");
  log_.Forward(seqs);
  if (absl::Status st = SendLocked(FrameKind::kLog); !st.ok()) return GroupFailed(st);
  absl::Status st = local_->Forward(seqs, out, options);
  // Only a failed collective breaks the group; input errors (decided before
  // any collective, identically on every rank) stay with this pass.
  if (!st.ok() && (!data_->status().ok() || !control_->status().ok())) return GroupFailed(st);
  return st;
}

int64_t GroupLeader::length(int64_t handle) const {
  absl::MutexLock lock(&mu_);
  return local_->length(handle);
}

SequenceModelStats GroupLeader::stats() const {
  absl::MutexLock lock(&mu_);
  return local_->stats();
}

absl::Status GroupLeader::SendLocked(FrameKind kind) {
  absl::Status st = SendFrame(control_, kind, frames_, log_.bytes());
  ++frames_;
  log_.Clear();
  last_send_ = Clock::now();
  return st;
}

absl::Status GroupLeader::GroupFailed(const absl::Status& cause) {
  return health_->CollectiveFailed(cause, absl::FromChrono(options_.name_grace));
}

void GroupLeader::HeartbeatLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const Clock::time_point due = last_send_ + options_.heartbeat_interval;
    const Clock::time_point now = Clock::now();
    if (now < due) {
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::FromChrono(due - now));
      continue;
    }
    if (!health_->ok()) return;  // nobody to talk to; followers time out and leave
    if (absl::Status st = SendLocked(FrameKind::kHeartbeat); !st.ok()) {
      GroupFailed(st).IgnoreError();
      return;
    }
  }
}

void GroupLeader::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      if (health_->ok()) SendLocked(FrameKind::kShutdown).IgnoreError();
    }
  }
  if (heartbeat_.joinable()) heartbeat_.join();
}

uint64_t GroupLeader::frames_sent() const {
  absl::MutexLock lock(&mu_);
  return frames_;
}

absl::Status RunFollower(Communicator* control, SequenceModel* model) {
  uint64_t expected = 0;
  std::string log;
  while (true) {
    FrameHeader header;
    if (absl::Status st = ReceiveFrame(control, &header, &log); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("waiting for frame ", expected,
                                                  " from rank 0: ", st.message()));
    }
    if (header.number != expected) {
      return absl::DataLossError(absl::StrCat("frame ", header.number, " from rank 0; expected ",
                                              expected));
    }
    ++expected;
    if (absl::Status st = ReplayStepLog(log, model); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("replaying frame ", header.number, ": ",
                                                  st.message()));
    }
    if (header.kind == FrameKind::kShutdown) return absl::OkStatus();
  }
}

}  // namespace treespec
