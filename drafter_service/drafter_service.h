// gRPC Drafter service: translates treespec.v1 Drafter messages to a Drafter
// (drafter.h) and back. No logic of its own.
#pragma once

#include <chrono>
#include <string>

#include "drafter_service/drafter.h"
#include "rpc/step_stream.h"
#include "treespec/v1/drafter.grpc.pb.h"

namespace treespec {

class DrafterService final : public v1::Drafter::Service, public StepStreamService {
 public:
  DrafterService(Drafter* drafter, std::string model) : drafter_(drafter), model_(std::move(model)) {}

  // The start-up cost profile DrafterInfo reports, and the drafter's stats
  // right after profiling: the profile's own drafts are left out of the
  // reported pre-draft counters. Call before serving.
  void SetStartupProfile(v1::DraftCostProfile profile, const DrafterStats& after_profile) {
    draft_cost_ = std::move(profile);
    baseline_ = after_profile;
  }

  // Test only (--debug_draft_delay_ms): every Draft call waits this long
  // before drafting, so that tests can make a drafter miss the coordinator's
  // draft deadline. Call before serving.
  void SetDebugDraftDelay(std::chrono::milliseconds delay) { debug_draft_delay_ = delay; }

  grpc::Status Open(grpc::ServerContext* ctx, const v1::DrafterOpenRequest* req,
                    v1::DrafterOpenResponse* resp) override;
  grpc::Status Draft(grpc::ServerContext* ctx, const v1::DraftRequest* req,
                     v1::DraftResponse* resp) override;
  grpc::Status DraftStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::DraftResponse, v1::DraftRequest>* stream) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseDraftsRequest* req,
                       v1::ReleaseDraftsResponse* resp) override;
  grpc::Status GetDrafterInfo(grpc::ServerContext* ctx, const v1::GetDrafterInfoRequest* req,
                              v1::DrafterInfoResponse* resp) override;

  std::vector<std::string> StreamMethods() const override { return {kDrafterDraftStreamMethod}; }

 private:
  Drafter* drafter_;
  std::string model_;
  v1::DraftCostProfile draft_cost_;
  DrafterStats baseline_;
  std::chrono::milliseconds debug_draft_delay_{0};
};

}  // namespace treespec
