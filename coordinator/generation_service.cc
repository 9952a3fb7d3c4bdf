#include "coordinator/generation_service.h"

#include "coordinator/generate_telemetry.h"
#include "rpc/status_convert.h"
#include "rpc/trace_grpc.h"

namespace treespec {

grpc::Status GenerationService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (auth_ != nullptr) {
    if (grpc::Status st = auth_->CheckGrpc(*ctx); !st.ok()) return st;
  }
  const auto received = RequestState::Clock::now();
  std::optional<RequestState::Clock::time_point> deadline;
  const auto sys_deadline = ctx->deadline();
  if (sys_deadline != std::chrono::system_clock::time_point::max()) {
    deadline = received + std::chrono::duration_cast<RequestState::Clock::duration>(
                              sys_deadline - std::chrono::system_clock::now());
  }
  GenerateTelemetry telemetry(coordinator_->telemetry(), ExtractTraceparent(ctx->client_metadata()),
                              received);
  absl::StatusOr<std::shared_ptr<RequestState>> state =
      coordinator_->Submit(*req, received, deadline, telemetry.context());
  if (!state.ok()) return telemetry.Finish(ToGrpc(state.status()));
  telemetry.Admitted((*state)->request());
  while (true) {
    v1::GenerateResponse chunk;
    bool done = false;
    absl::Status status;
    if ((*state)->Pop(absl::Milliseconds(20), &chunk, &done, &status)) {
      telemetry.OnChunk(chunk);
      if (!writer->Write(chunk)) {
        (*state)->Cancel();
        return telemetry.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      }
      continue;
    }
    if (done) return telemetry.Finish(ToGrpc(status));
    if (ctx->IsCancelled()) {
      (*state)->Cancel();
      return telemetry.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled"));
    }
  }
}

grpc::Status GenerationService::GetModelInfo(grpc::ServerContext* ctx,
                                             const v1::GetModelInfoRequest*, v1::ModelInfo* resp) {
  if (auth_ != nullptr) {
    if (grpc::Status st = auth_->CheckGrpc(*ctx); !st.ok()) return st;
  }
  *resp = coordinator_->ModelInfo();
  return grpc::Status::OK;
}

}  // namespace treespec
