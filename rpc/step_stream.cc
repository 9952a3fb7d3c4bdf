#include "rpc/step_stream.h"

namespace treespec {

grpc::Status StreamClosedStatus() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down: step stream closed");
}

bool StepStreamServer::Enter(grpc::ServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  open_[ctx] = false;
  return true;
}

void StepStreamServer::Leave(grpc::ServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  open_.erase(ctx);
}

bool StepStreamServer::SetBusy(grpc::ServerContext* ctx, bool busy) {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  open_[ctx] = busy;
  return true;
}

void StepStreamServer::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  // A busy stream ends after its answer (SetBusy); an idle one waits in Read,
  // which only a cancellation ends.
  for (const auto& [ctx, busy] : open_) {
    if (!busy) ctx->TryCancel();
  }
}

void StepStreamServer::Record(const char* method, std::chrono::steady_clock::time_point start,
                              int64_t start_unix_ns, const grpc::Status& status,
                              const v1::CallTrace& trace) {
  if (!recorder_) return;
  StreamCall call;
  call.method = method;
  call.start = start;
  call.end = std::chrono::steady_clock::now();
  call.start_unix_ns = start_unix_ns;
  call.status = status;
  call.trace = &trace;
  recorder_(call);
}

}  // namespace treespec
