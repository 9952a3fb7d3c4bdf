// An EAGLE drafter (as a process, build/bin/treespec-drafter --kind eagle)
// that is killed mid-stream and restarted on the same port: the stream
// completes with OK and exactly the plain greedy output, the coordinator
// re-opens the sequence on the new drafter mid-stream with the features of
// everything committed so far (prompt and generated tokens, kept per
// sequence by the coordinator), and drafting resumes: the request never
// fails because the drafter lost its features.
#include <signal.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kLong = 200;

std::string Demo(const std::string& name) { return SourceDir() + "/models/demo/" + name; }

TEST(EagleRecoveryTest, RestartedDrafterIsReopenedMidStreamWithItsFeatures) {
  const std::vector<std::string> extra = {"--target", Demo("target")};
  auto drafter = StartDrafterProcess("eagle", Demo("eagle-head"), "127.0.0.1:0", extra);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const std::string address = (*drafter)->address();
  WorkerConfig wc;
  wc.model = Demo("target");
  auto worker = InProcessWorker::Start(wc);
  ASSERT_TRUE(worker.ok()) << worker.status();
  CoordinatorConfig cc;
  cc.workers = {(*worker)->address()};
  cc.drafters = {{"eagle", address}};
  cc.options.default_drafter = "none";
  cc.verify_delay = milliseconds(30);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  const std::vector<int32_t> prompt = {1, 362, 363, 261, 350, 1985, 351, 281};
  GenerateResult plain = RunGenerate(stub.get(), MakeRequest(prompt, kLong, "none"));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();

  std::atomic<int> chunks{0};
  GenerateResult r;
  std::jthread reader([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
    r = RunGenerate(stub.get(), MakeRequest(prompt, kLong, "eagle", "3,2,2,1,1"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() >= 3; }, milliseconds(20000)));
  (*drafter)->Stop(SIGKILL);
  const int chunks_at_kill = chunks.load();
  auto restarted = StartDrafterProcess("eagle", Demo("eagle-head"), address, extra);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  // The live sequence is re-opened on the new process (its only sequence).
  auto dstub = v1::Drafter::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const bool reopened =
      Eventually([&] { return DrafterSequences(dstub.get()) == 1; }, milliseconds(30000));
  const int chunks_at_reopen = chunks.load();
  reader.join();

  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, plain.ids);
  EXPECT_TRUE(reopened) << "the stream was never re-opened on the restarted drafter";
  EXPECT_LT(chunks_at_kill, r.num_chunks) << "the stream ended before the kill";
  EXPECT_LT(chunks_at_reopen, r.num_chunks) << "the stream ended before the re-open";
  const v1::SpeculationStats& s = r.final_chunk.speculation();
  EXPECT_GT(s.fallback_steps(), 0) << s.ShortDebugString();
  EXPECT_GT(s.accepted_tokens(), 0) << s.ShortDebugString();
}

}  // namespace
}  // namespace treespec::testing
