// Start-up cost profiles end to end: an in-process worker and drafter profile
// themselves on the fixture models before serving, report the fitted
// coefficients in WorkerInfo / DrafterInfo, leave no sequence or pre-draft
// count behind, and the coordinator installs exactly those coefficients for
// its lanes; auto speculation over them still streams the plain output.
#include <memory>

#include "gtest/gtest.h"
#include "rpc/cost_profile.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

class StartupProfileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.worker.startup_profile = true;
    config.drafter_startup_profile = true;
    config.self = false;
    config.garbage = false;
    config.ngram = false;
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static Cluster* cluster_;
};
Cluster* StartupProfileTest::cluster_ = nullptr;

TEST_F(StartupProfileTest, WorkerReportsAFittedVerifyProfile) {
  auto stub = cluster_->worker()->NewStub();
  grpc::ClientContext ctx;
  v1::WorkerInfo info;
  ASSERT_TRUE(stub->GetWorkerInfo(&ctx, v1::GetWorkerInfoRequest(), &info).ok());
  const v1::VerifyCostProfile& p = info.verify_cost();
  EXPECT_EQ(p.source(), v1::COST_PROFILE_SOURCE_MEASURED) << p.ShortDebugString();
  EXPECT_GT(p.profile_ns(), 0);
  absl::StatusOr<VerifyCostModel> m = FromProto(p);
  ASSERT_TRUE(m.ok()) << m.status();
  // More sequences and tokens cost more; a plain step costs something.
  const double one = m->Predict({1, 1, 16});
  const double big = m->Predict({16, 256, 16 * 128});
  EXPECT_GT(one, 0);
  EXPECT_GT(big, 2 * one) << p.ShortDebugString();
  EXPECT_EQ(info.num_sequences(), 0) << "the profile's sequences are released";
  EXPECT_EQ(info.kv_blocks_used(), 0);
}

TEST_F(StartupProfileTest, DrafterReportsAFittedDraftProfile) {
  auto stub = cluster_->drafter("mamba")->NewStub();
  grpc::ClientContext ctx;
  v1::DrafterInfoResponse info;
  ASSERT_TRUE(stub->GetDrafterInfo(&ctx, v1::GetDrafterInfoRequest(), &info).ok());
  const v1::DraftCostProfile& p = info.draft_cost();
  EXPECT_EQ(p.source(), v1::COST_PROFILE_SOURCE_MEASURED) << p.ShortDebugString();
  absl::StatusOr<DraftCostModel> m = FromProto(p);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->Predict({6, 96, 288}), m->Predict({1, 1, 1})) << p.ShortDebugString();
  EXPECT_EQ(info.num_sequences(), 0) << "the profile's sequences are released";
  EXPECT_EQ(info.predraft_hits() + info.predraft_misses() + info.predraft_unprepared(), 0)
      << "the profile's drafts do not count as pre-draft outcomes";
}

TEST_F(StartupProfileTest, CoordinatorInstallsTheReportedCoefficients) {
  Coordinator* c = cluster_->coordinator()->coordinator();
  auto stub = cluster_->worker()->NewStub();
  grpc::ClientContext ctx;
  v1::WorkerInfo info;
  ASSERT_TRUE(stub->GetWorkerInfo(&ctx, v1::GetWorkerInfoRequest(), &info).ok());
  ASSERT_EQ(c->workers().size(), 1u);
  std::optional<VerifyCostModel> v = c->workers()[0]->verify_profile.Get();
  ASSERT_TRUE(v.has_value()) << "the coordinator did not take the worker's profile";
  const VerifyCostModel::Coefficients k = v->coefficients();
  EXPECT_DOUBLE_EQ(k.per_step, info.verify_cost().per_step_s());
  EXPECT_DOUBLE_EQ(k.per_sequence, info.verify_cost().per_sequence_s());
  EXPECT_DOUBLE_EQ(k.per_token, info.verify_cost().per_token_s());
  EXPECT_DOUBLE_EQ(k.per_context_token, info.verify_cost().per_context_token_s());
  EXPECT_EQ(k.knee_tokens, info.verify_cost().knee_tokens());

  auto dstub = cluster_->drafter("mamba")->NewStub();
  grpc::ClientContext dctx;
  v1::DrafterInfoResponse dinfo;
  ASSERT_TRUE(dstub->GetDrafterInfo(&dctx, v1::GetDrafterInfoRequest(), &dinfo).ok());
  ASSERT_EQ(c->drafters().size(), 1u);
  std::optional<DraftCostModel> d = c->drafters()[0]->draft_profile.Get();
  ASSERT_TRUE(d.has_value()) << "the coordinator did not take the drafter's profile";
  EXPECT_DOUBLE_EQ(d->coefficients().per_call, dinfo.draft_cost().per_call_s());
  EXPECT_DOUBLE_EQ(d->coefficients().per_sequence_level, dinfo.draft_cost().per_sequence_level_s());
  EXPECT_DOUBLE_EQ(d->coefficients().per_node, dinfo.draft_cost().per_node_s());
}

TEST_F(StartupProfileTest, AutoOverProfiledCostsStreamsThePlainOutput) {
  const std::vector<int32_t> prompt = TestPrompt(3, 6);
  GenerateResult plain = cluster_->Generate(MakeRequest(prompt, 40, "none"));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  GenerateResult spec = cluster_->Generate(MakeRequest(prompt, 40, "mamba", "auto"));
  ASSERT_TRUE(spec.status.ok()) << spec.status.error_message();
  EXPECT_EQ(spec.ids, plain.ids);
  const v1::SpeculationStats& s = spec.final_chunk.speculation();
  EXPECT_EQ(s.planned_steps(), s.steps()) << s.ShortDebugString();
}

}  // namespace
}  // namespace treespec::testing
