// gRPC Generation service: hands requests to the Coordinator and streams the
// chunks its lanes produce; a client that goes away cancels its request.
#pragma once

#include "coordinator/coordinator.h"
#include "treespec/v1/generation.grpc.pb.h"

namespace treespec {

class GenerationService final : public v1::Generation::Service {
 public:
  explicit GenerationService(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                            v1::ModelInfo* resp) override;

 private:
  Coordinator* coordinator_;
};

}  // namespace treespec
