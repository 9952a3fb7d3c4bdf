// Two coordinator replicas in front of one worker and one drafter (as
// k8s/base runs them): concurrent requests through both never collide on
// sequence ids, and every stream equals the target's greedy output.
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

TEST(CoordinatorReplicasTest, TwoCoordinatorsOnOneWorkerAndDrafter) {
  auto worker = InProcessWorker::Start();
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto drafter = InProcessDrafter::Start(DrafterConfig{});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  std::vector<std::unique_ptr<InProcessCoordinator>> coordinators;
  for (int i = 0; i < 2; ++i) {
    CoordinatorConfig cc;
    cc.workers = {(*worker)->address()};
    cc.drafters = {{"mamba", (*drafter)->address()}};
    cc.options.default_drafter = "none";
    auto c = InProcessCoordinator::Start(cc);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinators.push_back(std::move(*c));
  }
  constexpr int kPerReplica = 4;
  constexpr int kTokens = 24;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 2 * kPerReplica; ++i) prompts.push_back(TestPrompt(i));
  const std::vector<std::vector<int32_t>> reference = GreedyReference(prompts, kTokens);
  std::vector<GenerateResult> results(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      auto stub = coordinators[i % 2]->NewStub();
      results[i] = RunGenerate(stub.get(), MakeRequest(prompts[i], kTokens,
                                                       i % 4 < 2 ? "mamba" : "none"));
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(results[i].status.ok())
        << "request " << i << " via coordinator " << i % 2 << ": "
        << results[i].status.error_message();
    EXPECT_EQ(results[i].ids, reference[i]) << "request " << i;
  }
  auto ws = (*worker)->NewStub();
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(ws.get()) == 0; },
                         std::chrono::milliseconds(5000)))
      << "every sequence was released";
}

}  // namespace
}  // namespace treespec::testing
