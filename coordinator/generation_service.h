// gRPC Generation service: hands requests to the Coordinator and streams the
// chunks its lanes produce; a client that goes away cancels its request.
// With a BearerAuth, every call must carry a valid bearer token
// (rpc/bearer_auth.h) before anything else happens: UNAUTHENTICATED otherwise.
#pragma once

#include "coordinator/coordinator.h"
#include "rpc/bearer_auth.h"
#include "treespec/v1/generation.grpc.pb.h"

namespace treespec {

class GenerationService final : public v1::Generation::Service {
 public:
  // `auth` (not owned, may be null: no authentication) outlives the service.
  explicit GenerationService(Coordinator* coordinator, BearerAuth* auth = nullptr)
      : coordinator_(coordinator), auth_(auth) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                            v1::ModelInfo* resp) override;

 private:
  Coordinator* coordinator_;
  BearerAuth* auth_;
};

}  // namespace treespec
