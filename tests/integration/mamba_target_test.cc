// A Mamba target served by treespec-worker (a real process): the worker only
// knows SequenceModel, so a recurrent target needs no code of its own. Plain
// greedy decoding and speculative decoding with a Mamba drafter (the same
// model: every draft is the target's own choice) both stream exactly the
// target's greedy continuation, decoded in process by LocalModel; the worker
// holds nothing afterwards.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/integration/cluster.h"
#include "tools/cli/local_model.h"

namespace treespec::testing {
namespace {

constexpr int kMaxTokens = 40;

std::vector<int32_t> MambaGreedy(const std::vector<int32_t>& prompt) {
  auto local = LocalModel::Load(FixtureModel(kMambaModel), "cpu", 1, 256);
  EXPECT_TRUE(local.ok()) << local.status();
  std::vector<int32_t> out;
  absl::Status st = (*local)->Generate({prompt}, SamplingParams{}, {0}, kMaxTokens, {},
                                       [&](size_t, int32_t t) { out.push_back(t); });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(MambaTargetTest, WorkerServesAMambaTargetPlainAndSpeculative) {
  auto worker = Subprocess::Start({BinaryPath("treespec-worker"), "--model",
                                   FixtureModel(kMambaModel), "--listen", "127.0.0.1:0",
                                   "--max-context", "256", "--max-sequences", "8",
                                   "--max-tree-nodes", "32"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto drafter = InProcessDrafter::Start({"mamba", kMambaModel});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  CoordinatorConfig cc;
  cc.workers = {(*worker)->address()};
  cc.drafters = {{"mamba", (*drafter)->address()}};
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> prompt = TestPrompt(p, 5 + p);
    const std::vector<int32_t> expected = MambaGreedy(prompt);
    for (const std::string d : {"none", "mamba"}) {
      GenerateResult r = RunGenerate(stub.get(), MakeRequest(prompt, kMaxTokens, d, "3,2,1"));
      ASSERT_TRUE(r.status.ok()) << d << ": " << r.status.error_message();
      EXPECT_EQ(r.ids, expected) << "prompt " << p << " drafter " << d;
    }
  }
  auto worker_stub = v1::Worker::NewStub(MakeChannel((*worker)->address(), {}));
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(worker_stub.get()) == 0; },
                         std::chrono::milliseconds(5000)));
}

}  // namespace
}  // namespace treespec::testing
