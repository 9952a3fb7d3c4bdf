#include "worker/group_service.h"

#include "rpc/status_convert.h"

namespace treespec {

template <typename Call>
grpc::Status GroupGatedWorkerService::Gate(Call&& call) {
  if (absl::Status st = health_->status(); !st.ok()) return ToGrpc(st);
  grpc::Status result = call();
  if (absl::Status st = health_->status(); !st.ok()) return ToGrpc(st);
  return result;
}

grpc::Status GroupGatedWorkerService::Open(grpc::ServerContext* ctx,
                                           const v1::WorkerOpenRequest* req,
                                           v1::WorkerOpenResponse* resp) {
  return Gate([&] { return inner_->Open(ctx, req, resp); });
}

grpc::Status GroupGatedWorkerService::Verify(grpc::ServerContext* ctx,
                                             const v1::VerifyRequest* req,
                                             v1::VerifyResponse* resp) {
  return Gate([&] { return inner_->Verify(ctx, req, resp); });
}

grpc::Status GroupGatedWorkerService::VerifyStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::VerifyResponse, v1::VerifyRequest>* stream) {
  return streams_.Serve(ctx, stream, kWorkerVerifyMethod,
                        [&](const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
                          return Verify(ctx, req, resp);
                        });
}

grpc::Status GroupGatedWorkerService::Release(grpc::ServerContext* ctx,
                                              const v1::ReleaseRequest* req,
                                              v1::ReleaseResponse* resp) {
  return Gate([&] { return inner_->Release(ctx, req, resp); });
}

grpc::Status GroupGatedWorkerService::GetWorkerInfo(grpc::ServerContext* ctx,
                                                    const v1::GetWorkerInfoRequest* req,
                                                    v1::WorkerInfo* resp) {
  return Gate([&] { return inner_->GetWorkerInfo(ctx, req, resp); });
}

}  // namespace treespec
