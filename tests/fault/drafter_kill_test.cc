// Fault tests with services as real processes (build/bin/treespec-*):
//  - SIGKILL the drafter mid-stream: the stream completes with OK, token for
//    token the plain greedy output, and its stats count fallback steps (also
//    with draft-ahead on, its calls in flight);
//  - restart a drafter on the same port: later requests use it again;
//  - SIGKILL a worker: its in-flight requests end with UNAVAILABLE naming
//    the worker, a request on another worker is untouched, and new requests
//    go to the healthy worker;
//  - all three services as processes with the `treespec` client CLI, each
//    service exiting cleanly on SIGTERM.
//
// Except in the last test the coordinator runs in process and pauses before
// every Verify so that streams are long enough to act on mid-stream.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr int kLong = 150;  // tokens of the streams that are interrupted

class DrafterKillTest : public ::testing::Test {
 protected:
  // Extra treespec-drafter flags.
  virtual std::vector<std::string> DrafterFlags() const { return {}; }
  void SetUp() override {
    auto d = StartDrafterProcess("mamba", kMambaModel, "127.0.0.1:0", DrafterFlags());
    ASSERT_TRUE(d.ok()) << d.status();
    drafter_ = std::move(*d);
    auto w = InProcessWorker::Start();
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    CoordinatorConfig cc;
    cc.workers = {worker_->address()};
    cc.drafters = {{"mamba", drafter_->address()}};
    cc.verify_delay = milliseconds(10);
    auto c = InProcessCoordinator::Start(std::move(cc));
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    stub_ = coordinator_->NewStub();
  }

  void TearDown() override {
    stub_.reset();
    coordinator_.reset();
    worker_.reset();
    drafter_.reset();
  }

  std::unique_ptr<Subprocess> drafter_;
  std::unique_ptr<InProcessWorker> worker_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(DrafterKillTest, KilledDrafterFallsBackToPlainDecoding) {
  const std::vector<int32_t> prompt = TestPrompt(50);
  const auto expected = GreedyReference({prompt}, kLong)[0];
  std::atomic<int> chunks{0};
  GenerateResult r;
  std::jthread reader([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
    r = RunGenerate(stub_.get(), MakeRequest(prompt, kLong, "mamba", "3,2,2,1,1"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() >= 5; }, milliseconds(10000)));
  const int status = drafter_->Stop(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
  const int chunks_at_kill = chunks.load();
  reader.join();

  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_LT(chunks_at_kill, r.num_chunks) << "the stream ended before the kill";
  EXPECT_EQ(r.ids, expected);
  ASSERT_TRUE(r.has_final);
  const v1::SpeculationStats& s = r.final_chunk.speculation();
  EXPECT_EQ(r.final_chunk.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_GT(s.fallback_steps(), 0);
  EXPECT_GT(s.drafted_tokens(), 0) << "drafts before the kill";
  EXPECT_EQ(s.accepted_tokens() + s.steps(), kLong - 1);

  // Without the drafter, new requests still complete (plainly).
  GenerateResult plain = RunGenerate(stub_.get(), MakeRequest(prompt, 12, "mamba", "chain:4"));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(plain.ids, GreedyReference({prompt}, 12)[0]);
  EXPECT_EQ(plain.final_chunk.speculation().fallback_steps(),
            plain.final_chunk.speculation().steps());
}

// Draft-ahead on (off by default on CPU drafters): the kill lands while an
// ahead call, or the commit of a candidate being verified, is in flight.
class DraftAheadKillTest : public DrafterKillTest {
 protected:
  std::vector<std::string> DrafterFlags() const override {
    return {"--draft_ahead=1", "--predraft_max_batch=0"};
  }
};

TEST_F(DraftAheadKillTest, KilledDrafterFallsBackToPlainDecoding) {
  const std::vector<int32_t> prompt = TestPrompt(52);
  const auto expected = GreedyReference({prompt}, kLong)[0];
  // Before the kill: candidates are asked for and used.
  GenerateResult warm = RunGenerate(stub_.get(), MakeRequest(prompt, 40, "mamba", "chain:3"));
  ASSERT_TRUE(warm.status.ok()) << warm.status.error_message();
  EXPECT_GT(warm.final_chunk.speculation().draft_ahead_steps(), 0)
      << warm.final_chunk.speculation().ShortDebugString();
  std::atomic<int> chunks{0};
  GenerateResult r;
  std::jthread reader([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
    r = RunGenerate(stub_.get(), MakeRequest(prompt, kLong, "mamba", "chain:3"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() >= 5; }, milliseconds(10000)));
  const int status = drafter_->Stop(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
  reader.join();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, expected);
  const v1::SpeculationStats& s = r.final_chunk.speculation();
  EXPECT_GT(s.fallback_steps(), 0);
  EXPECT_EQ(s.accepted_tokens() + s.steps(), kLong - 1);
}

TEST_F(DrafterKillTest, RestartedDrafterIsUsedAgain) {
  const std::string address = drafter_->address();
  const std::vector<int32_t> prompt = TestPrompt(51);
  const auto expected = GreedyReference({prompt}, 24)[0];
  auto request = MakeRequest(prompt, 24, "mamba", "3,3,2,1");

  GenerateResult before = RunGenerate(stub_.get(), request);
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  EXPECT_EQ(before.final_chunk.speculation().fallback_steps(), 0);

  drafter_->Stop(SIGKILL);
  GenerateResult during = RunGenerate(stub_.get(), request);
  ASSERT_TRUE(during.status.ok()) << during.status.error_message();
  EXPECT_EQ(during.ids, expected);
  EXPECT_GT(during.final_chunk.speculation().fallback_steps(), 0);

  auto d = StartDrafterProcess("mamba", kMambaModel, address);
  ASSERT_TRUE(d.ok()) << d.status();
  drafter_ = std::move(*d);
  ASSERT_EQ(drafter_->address(), address);

  // The coordinator retries the drafter with a back-off; within a few
  // seconds requests are drafted again, and the output never changes.
  GenerateResult after;
  const bool recovered = Eventually(
      [&] {
        after = RunGenerate(stub_.get(), request);
        EXPECT_TRUE(after.status.ok()) << after.status.error_message();
        EXPECT_EQ(after.ids, expected);
        return after.status.ok() && after.final_chunk.speculation().fallback_steps() == 0;
      },
      milliseconds(30000));
  EXPECT_TRUE(recovered) << "still falling back: "
                         << after.final_chunk.speculation().ShortDebugString();
  EXPECT_GT(after.final_chunk.speculation().drafted_tokens(), 0);
}

// Two workers: a process that is killed and an in-process one that stays.
TEST(WorkerKillTest, KilledWorkerFailsItsRequestsAndOthersContinue) {
  auto dying = StartWorkerProcess();
  ASSERT_TRUE(dying.ok()) << dying.status();
  auto healthy = InProcessWorker::Start();
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  CoordinatorConfig cc;
  cc.workers = {(*dying)->address(), (*healthy)->address()};
  cc.verify_delay = milliseconds(10);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  const std::vector<int32_t> p1 = TestPrompt(60), p2 = TestPrompt(61), p3 = TestPrompt(62);
  const auto expected = GreedyReference({p1, p2}, kLong);
  const auto expected3 = GreedyReference({p3}, 16)[0];

  // The first request goes to the least loaded worker, the first one listed
  // (the process); the second, started once the first streams, to the other.
  std::atomic<int> chunks1{0}, chunks2{0};
  GenerateResult r1, r2;
  std::jthread t1([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks1.fetch_add(1); };
    r1 = RunGenerate(stub.get(), MakeRequest(p1, kLong, "none"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks1.load() >= 1; }, milliseconds(10000)));
  std::jthread t2([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks2.fetch_add(1); };
    r2 = RunGenerate(stub.get(), MakeRequest(p2, kLong, "none"), o);
  });
  ASSERT_TRUE(
      Eventually([&] { return chunks1.load() >= 5 && chunks2.load() >= 1; }, milliseconds(10000)));
  ASSERT_EQ(WorkerSequences((*healthy)->NewStub().get()), 1) << "request 2 is not on worker 2";
  const std::string dead_address = (*dying)->address();
  (*dying)->Stop(SIGKILL);
  t1.join();
  t2.join();

  EXPECT_EQ(r1.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r1.status.error_message();
  EXPECT_THAT(r1.status.error_message(), HasSubstr(dead_address));
  EXPECT_FALSE(r1.has_final);
  // What it streamed before the failure was right.
  ASSERT_LE(r1.ids.size(), expected[0].size());
  EXPECT_EQ(r1.ids, std::vector<int32_t>(expected[0].begin(), expected[0].begin() + r1.ids.size()));

  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_EQ(r2.ids, expected[1]);

  // New requests go to the healthy worker.
  for (int i = 0; i < 3; ++i) {
    GenerateResult r3 = RunGenerate(stub.get(), MakeRequest(p3, 16, "none"));
    ASSERT_TRUE(r3.status.ok()) << "attempt " << i << ": " << r3.status.error_message();
    EXPECT_EQ(r3.ids, expected3);
  }
}

// A drafter killed with SIGTERM shuts down gracefully; nothing breaks either.
TEST_F(DrafterKillTest, TerminatedDrafterExitsCleanlyAndStreamsComplete) {
  const std::vector<int32_t> prompt = TestPrompt(52);
  const auto expected = GreedyReference({prompt}, 60)[0];
  std::atomic<int> chunks{0};
  GenerateResult r;
  std::jthread reader([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
    r = RunGenerate(stub_.get(), MakeRequest(prompt, 60, "mamba", "chain:4"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() >= 3; }, milliseconds(10000)));
  const int status = drafter_->Stop(SIGTERM, milliseconds(40000));
  reader.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, expected);
}

// worker, drafter and coordinator processes, and the client CLI:
// `treespec generate --ids ... --json` prints exactly the plain greedy tokens
// (up to the model's EOS) with the speculation statistics.
TEST(AllProcessesTest, ClientCliThroughAClusterOfProcesses) {
  auto worker = StartWorkerProcess();
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto drafter = StartDrafterProcess("mamba", kMambaModel);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  auto coordinator = Subprocess::Start(
      {BinaryPath("treespec-coordinator"), "--workers", (*worker)->address(), "--drafters",
       "mamba=" + (*drafter)->address(), "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();

  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5};
  std::vector<int32_t> expected = GreedyReference({prompt}, 40)[0];
  const auto eos = std::find(expected.begin(), expected.end(), 2);
  const bool stopped = eos != expected.end();
  expected.erase(eos, expected.end());  // an EOS is counted, not emitted

  for (const std::string drafter_name : {"mamba", "none"}) {
    auto run = RunProcess({BinaryPath("treespec"), "generate", "--server",
                           (*coordinator)->address(), "--ids", "1,17,42,99,5", "--max-tokens", "40",
                           "--drafter", drafter_name, "--tree", "3,2,2,1,1", "--json"},
                          milliseconds(60000));
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 0)
        << "wait status " << run->wait_status << ", stdout: " << run->stdout_text;
    nlohmann::json j = nlohmann::json::parse(run->stdout_text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << run->stdout_text;
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), expected) << drafter_name;
    EXPECT_EQ(j["finish_reason"], stopped ? "stop" : "length") << drafter_name;
    EXPECT_EQ(j["drafter"], drafter_name);
    EXPECT_EQ(j["fallback_steps"], 0);
    if (drafter_name == "mamba") {
      EXPECT_GT(j["drafted_tokens"].get<int>(), 0);
    }
  }

  // A bad request is a non-zero exit with the server's message.
  auto bad = RunProcess({BinaryPath("treespec"), "generate", "--server", (*coordinator)->address(),
                         "--ids", "1,500", "--max-tokens", "4"},
                        milliseconds(60000));
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_FALSE(WIFEXITED(bad->wait_status) && WEXITSTATUS(bad->wait_status) == 0);

  // Every service shuts down cleanly on SIGTERM, the coordinator first.
  for (Subprocess* p : {coordinator->get(), drafter->get(), worker->get()}) {
    const int status = p->Stop(SIGTERM, milliseconds(40000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  }
}

}  // namespace
}  // namespace treespec::testing
