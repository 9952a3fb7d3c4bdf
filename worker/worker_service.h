// gRPC Worker service: translates treespec.v1 Worker messages to TargetRunner
// calls and back. No logic of its own.
#pragma once

#include <string>

#include "rpc/step_stream.h"
#include "treespec/v1/worker.grpc.pb.h"
#include "worker/target_runner.h"

namespace treespec {

struct WorkerIdentity {
  std::string model;
  std::string device;
  int tp_size = 1;
  std::vector<int32_t> eos_token_ids;
  v1::VerifyCostProfile verify_cost;  // start-up profile (unset source: none)
};

class WorkerService final : public v1::Worker::Service, public StepStreamService {
 public:
  WorkerService(TargetRunner* runner, WorkerIdentity identity)
      : runner_(runner), identity_(std::move(identity)) {}

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

  std::vector<std::string> StreamMethods() const override;

 private:
  TargetRunner* runner_;
  WorkerIdentity identity_;
};

}  // namespace treespec
