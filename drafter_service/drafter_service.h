// gRPC Drafter service: translates treespec.v1 Drafter messages to a Drafter
// (drafter.h) and back. No logic of its own.
#pragma once

#include <string>

#include "drafter_service/drafter.h"
#include "treespec/v1/drafter.grpc.pb.h"

namespace treespec {

class DrafterService final : public v1::Drafter::Service {
 public:
  DrafterService(Drafter* drafter, std::string model) : drafter_(drafter), model_(std::move(model)) {}

  grpc::Status Open(grpc::ServerContext* ctx, const v1::DrafterOpenRequest* req,
                    v1::DrafterOpenResponse* resp) override;
  grpc::Status Draft(grpc::ServerContext* ctx, const v1::DraftRequest* req,
                     v1::DraftResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseDraftsRequest* req,
                       v1::ReleaseDraftsResponse* resp) override;
  grpc::Status GetDrafterInfo(grpc::ServerContext* ctx, const v1::GetDrafterInfoRequest* req,
                              v1::DrafterInfoResponse* resp) override;

 private:
  Drafter* drafter_;
  std::string model_;
};

}  // namespace treespec
