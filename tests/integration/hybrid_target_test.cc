// Mamba-2 and Mamba-2 + attention (Bamba) targets served by treespec-worker
// (a real process): the worker only knows SequenceModel, so the STree tree
// scan and activation replay need no worker code. For tiny_mamba2 and
// tiny_bamba, plain greedy decoding and speculative decoding with two
// drafters — the target itself (every draft is the target's own choice, so
// long paths are accepted and replayed) and tiny_mamba (a different model:
// drafts are rejected part-way, so replay stops inside trees) — stream
// exactly the target's greedy continuation decoded in process by LocalModel,
// for several concurrent requests; the worker holds nothing afterwards.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

constexpr int kMaxTokens = 32;

class HybridTargetTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridTargetTest, WorkerServesItPlainAndSpeculative) {
  const std::string target = GetParam();
  auto worker = Subprocess::Start({BinaryPath("treespec-worker"), "--model", FixtureModel(target),
                                   "--listen", "127.0.0.1:0", "--max-context", "256",
                                   "--max-sequences", "16", "--max-tree-nodes", "32"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  // A Mamba-2 model drafts as kind "mamba", a hybrid as "transformer".
  DrafterConfig self_config;
  self_config.kind = target == "tiny_mamba2" ? "mamba" : "transformer";
  self_config.model = target;
  auto self = InProcessDrafter::Start(self_config);
  ASSERT_TRUE(self.ok()) << self.status();
  auto mamba = InProcessDrafter::Start(DrafterConfig{});
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  CoordinatorConfig cc;
  cc.workers = {(*worker)->address()};
  cc.drafters = {{"self", (*self)->address()}, {"mamba", (*mamba)->address()}};
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 3; ++p) prompts.push_back(TestPrompt(p, 5 + 3 * p));
  const std::vector<std::vector<int32_t>> want = GreedyReference(prompts, kMaxTokens, target);
  std::vector<v1::GenerateRequest> requests;
  std::vector<std::string> what;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (const auto& [drafter, tree] : std::vector<std::pair<std::string, std::string>>{
             {"none", ""}, {"self", "3,2,1"}, {"mamba", "2,2,1"}}) {
      requests.push_back(MakeRequest(prompts[p], kMaxTokens, drafter, tree));
      what.push_back(absl::StrCat(target, " prompt ", p, " drafter ", drafter));
    }
  }
  std::vector<GenerateResult> results = RunConcurrently(stub.get(), requests);
  for (size_t k = 0; k < results.size(); ++k) {
    ASSERT_TRUE(results[k].status.ok()) << what[k] << ": " << results[k].status.error_message();
    EXPECT_EQ(results[k].ids, want[k / 3]) << what[k];
  }
  // The target drafting for itself has its drafts accepted.
  GenerateResult alone = RunGenerate(stub.get(), MakeRequest(prompts[0], kMaxTokens, "self", "chain:4"));
  ASSERT_TRUE(alone.has_final);
  EXPECT_EQ(alone.ids, want[0]);
  EXPECT_GT(alone.final_chunk.speculation().accepted_tokens(), kMaxTokens / 2);
  auto worker_stub = v1::Worker::NewStub(MakeChannel((*worker)->address(), {}));
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(worker_stub.get()) == 0; },
                         std::chrono::milliseconds(5000)));
}

INSTANTIATE_TEST_SUITE_P(Targets, HybridTargetTest, ::testing::Values("tiny_mamba2", "tiny_bamba"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace treespec::testing
