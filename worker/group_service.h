// GroupGatedWorkerService: rank 0's gRPC face of a tensor-parallel group. It
// forwards every Worker RPC to the plain WorkerService while the group is
// healthy; once the GroupHealth has failed — before the call, or while the
// call was running (a rank died mid-pass) — it answers UNAVAILABLE with the
// group's message, which names the lost rank. GetWorkerInfo fails too, so a
// coordinator's prober does not mark the group healthy again.
// Thread-safe.
#pragma once

#include "treespec/v1/worker.grpc.pb.h"
#include "worker/group_health.h"
#include "worker/worker_service.h"

namespace treespec {

class GroupGatedWorkerService final : public v1::Worker::Service, public StepStreamService {
 public:
  // Neither is owned.
  GroupGatedWorkerService(WorkerService* inner, const GroupHealth* health)
      : inner_(inner), health_(health) {}

  grpc::Status Open(grpc::ServerContext* ctx, const v1::WorkerOpenRequest* req,
                    v1::WorkerOpenResponse* resp) override;
  grpc::Status Verify(grpc::ServerContext* ctx, const v1::VerifyRequest* req,
                      v1::VerifyResponse* resp) override;
  grpc::Status VerifyStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::VerifyResponse, v1::VerifyRequest>* stream) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override;
  grpc::Status GetWorkerInfo(grpc::ServerContext* ctx, const v1::GetWorkerInfoRequest* req,
                             v1::WorkerInfo* resp) override;

  std::vector<std::string> StreamMethods() const override { return inner_->StreamMethods(); }

 private:
  template <typename Call>
  grpc::Status Gate(Call&& call);

  WorkerService* const inner_;
  const GroupHealth* const health_;
};

}  // namespace treespec
