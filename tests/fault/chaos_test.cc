// Chaos tests (issue 17 point 6): faults injected while the cluster is under
// load, with the services as real processes (build/bin/treespec-*) and the
// coordinator in process:
//  - the drafter is SIGKILLed and restarted on its port every ~2 s while
//    clients stream without pause: no request fails, every greedy stream is
//    token for token the plain greedy output, steps fell back while the
//    drafter was away and drafted again after it came back, and nothing is
//    left open on the worker or the drafter afterwards; once with the
//    drafter's defaults and once with draft-ahead in every step;
//  - one worker group of two is SIGKILLed under load: only the requests it
//    was serving fail, with UNAVAILABLE naming it; the others complete
//    exactly, and requests sent right after the kill all go to the survivor;
//  - a drafter slower than the coordinator's draft deadline
//    (treespec-drafter --debug_draft_delay_ms, test only): steps fall back
//    and every stream is exactly the plain greedy output.
//
// Each case fails if the fallback it checks were missing: a Draft failure
// that ended the request instead of falling back shows up as a failed
// request (the first and third cases), and an UNAVAILABLE worker Open that
// was not re-routed as a failed request sent after the kill (the second).
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr int kPrompts = 8;

std::vector<std::vector<int32_t>> Prompts(int first) {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < kPrompts; ++i) p.push_back(TestPrompt(first + i, 4 + i % 5));
  return p;
}

// Closed-loop clients: each sends its next request as soon as the last one
// ended, until stopped. Greedy requests on varied trees (auto included) and
// every fourth one sampled (seeded, multi-round verification): greedy ones
// are checked token for token, sampled ones for their status.
class LoadClients {
 public:
  LoadClients(v1::Generation::Stub* stub, const std::vector<std::vector<int32_t>>& prompts,
              const std::vector<std::vector<int32_t>>& expected, int max_tokens, int num_clients)
      : stub_(stub), prompts_(prompts), expected_(expected), max_tokens_(max_tokens) {
    for (int c = 0; c < num_clients; ++c) {
      threads_.emplace_back([this, c] { Loop(c); });
    }
  }
  ~LoadClients() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::atomic<int> ok{0}, failed{0}, mismatched{0}, sampled{0};
  std::atomic<int64_t> fallback_steps{0}, drafted_tokens{0};
  // Requests that started after this many ms since the load began drafted.
  std::atomic<int64_t> drafted_late{0};
  std::mutex mu;
  std::map<std::string, int> failures;  // "CODE: message" -> count

 private:
  void Loop(int client) {
    const std::vector<std::string> trees = {"", "chain:4", "3,2,2,1,1", "2,2,1,1"};
    for (int i = 0; !stop_.load(); ++i) {
      const int p = (client + i) % kPrompts;
      const bool is_sampled = (client + i) % 4 == 3;
      v1::GenerateRequest req =
          MakeRequest(prompts_[p], max_tokens_, "mamba", trees[(client + 2 * i) % trees.size()]);
      if (is_sampled) {
        req.mutable_sampling()->set_temperature(0.8f);
        req.mutable_sampling()->set_seed(1000 + i);
        req.mutable_speculation()->set_verification(v1::VERIFICATION_MODE_MULTIROUND);
      }
      GenerateResult r = RunGenerate(stub_, req);
      if (!r.status.ok()) {
        failed.fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ++failures[absl::StrCat(r.status.error_code(), ": ", r.status.error_message())];
        continue;
      }
      ok.fetch_add(1);
      const v1::SpeculationStats& s = r.final_chunk.speculation();
      fallback_steps.fetch_add(s.fallback_steps());
      drafted_tokens.fetch_add(s.drafted_tokens());
      if (is_sampled) {
        sampled.fetch_add(1);
        if (static_cast<int>(r.ids.size()) != max_tokens_) mismatched.fetch_add(1);
      } else if (r.ids != expected_[p]) {
        mismatched.fetch_add(1);
      }
    }
  }

  v1::Generation::Stub* stub_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const std::vector<std::vector<int32_t>>& expected_;
  const int max_tokens_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

std::string Failures(LoadClients& load) {
  std::lock_guard<std::mutex> lock(load.mu);
  std::string out;
  for (const auto& [what, n] : load.failures) absl::StrAppend(&out, n, " x ", what, "\n");
  return out;
}

// ---------------------------------------------------------------- a

// `flags`: extra treespec-drafter flags (the same at every restart).
void DrafterKilledAndRestartedEveryFewSeconds(const std::vector<std::string>& flags) {
  auto drafter = StartDrafterProcess("mamba", kMambaModel, "127.0.0.1:0", flags);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const std::string drafter_address = (*drafter)->address();
  auto worker = InProcessWorker::Start();
  ASSERT_TRUE(worker.ok()) << worker.status();
  CoordinatorConfig cc;
  cc.workers = {(*worker)->address()};
  cc.drafters = {{"mamba", drafter_address}};
  cc.verify_delay = milliseconds(2);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  constexpr int kTokens = 40;
  const auto prompts = Prompts(300);
  const auto expected = GreedyReference(prompts, kTokens);
  LoadClients load(stub.get(), prompts, expected, kTokens, /*num_clients=*/12);

  // Six kill/restart cycles: ~1.5 s up, ~0.7 s down. The restart happens on
  // this (the test's main) thread, which the children's death signal follows.
  constexpr int kCycles = 6;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    std::this_thread::sleep_for(milliseconds(1500));
    const int status = (*drafter)->Stop(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(status)) << "cycle " << cycle << ": wait status " << status;
    std::this_thread::sleep_for(milliseconds(700));
    drafter = StartDrafterProcess("mamba", kMambaModel, drafter_address, flags);
    ASSERT_TRUE(drafter.ok()) << "cycle " << cycle << ": " << drafter.status();
  }
  // The drafter stays up from here: the coordinator re-opens its sequences
  // there and drafts again.
  const int64_t drafted_before = load.drafted_tokens.load();
  const int ok_before = load.ok.load();
  ASSERT_TRUE(Eventually(
      [&] { return load.ok.load() >= ok_before + 24 && load.drafted_tokens.load() > drafted_before; },
      milliseconds(30000)))
      << "no drafting after the last restart";
  load.Stop();

  EXPECT_EQ(load.failed.load(), 0) << Failures(load);
  EXPECT_EQ(load.mismatched.load(), 0) << "streams differing from plain greedy decoding";
  EXPECT_GT(load.ok.load(), 50);
  EXPECT_GT(load.sampled.load(), 0);
  EXPECT_GT(load.fallback_steps.load(), 0) << "the drafter's absences were never noticed";
  EXPECT_GT(load.drafted_tokens.load(), 0);

  // Nothing stays open: the coordinator released everything it opened on
  // the worker and on the (last) drafter.
  auto worker_stub = (*worker)->NewStub();
  auto drafter_stub = v1::Drafter::NewStub(MakeChannel(drafter_address, {}));
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(worker_stub.get()) == 0; },
                         milliseconds(10000)))
      << WorkerSequences(worker_stub.get()) << " sequences left on the worker";
  EXPECT_TRUE(Eventually([&] { return DrafterSequences(drafter_stub.get()) == 0; },
                         milliseconds(10000)))
      << DrafterSequences(drafter_stub.get()) << " sequences left on the drafter";
}

TEST(ChaosTest, DrafterKilledAndRestartedEveryFewSecondsFailsNoRequest) {
  DrafterKilledAndRestartedEveryFewSeconds({});
}

// The same with draft-ahead (off by default on CPU drafters), in every step:
// kills land with ahead calls and their commits in flight.
TEST(ChaosTest, DraftAheadDrafterKilledAndRestartedEveryFewSecondsFailsNoRequest) {
  DrafterKilledAndRestartedEveryFewSeconds({"--draft_ahead=1", "--predraft_max_batch=0"});
}

// ---------------------------------------------------------------- b

// Two worker groups, both processes; group A is killed while both serve a
// batch of long streams.
TEST(ChaosTest, KilledWorkerGroupFailsOnlyItsOwnRequests) {
  auto group_a = StartWorkerProcess();
  ASSERT_TRUE(group_a.ok()) << group_a.status();
  auto group_b = StartWorkerProcess();
  ASSERT_TRUE(group_b.ok()) << group_b.status();
  const std::string dead = (*group_a)->address();
  CoordinatorConfig cc;
  cc.workers = {dead, (*group_b)->address()};
  // Long pauses before each Verify: group A's death goes unnoticed for a
  // while after the kill, so that requests sent meanwhile are routed to it.
  cc.verify_delay = milliseconds(150);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();
  auto stub_a = v1::Worker::NewStub(MakeChannel(dead, {}));
  auto stub_b = v1::Worker::NewStub(MakeChannel((*group_b)->address(), {}));

  constexpr int kStreams = 12, kTokens = 40;
  const auto prompts = Prompts(400);
  const auto expected = GreedyReference(prompts, kTokens);
  std::vector<GenerateResult> results(kStreams);
  std::vector<std::atomic<int>> chunks(kStreams);
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back([&, i] {
      GenerateOptions o;
      o.on_chunk = [&, i](const GenerateResult&) { chunks[i].fetch_add(1); };
      results[i] = RunGenerate(stub.get(), MakeRequest(prompts[i % kPrompts], kTokens, "none"), o);
    });
  }
  ASSERT_TRUE(Eventually(
      [&] {
        for (auto& c : chunks) {
          if (c.load() < 3) return false;
        }
        return true;
      },
      milliseconds(30000)));
  const int on_a = WorkerSequences(stub_a.get());
  const int on_b = WorkerSequences(stub_b.get());
  ASSERT_EQ(on_a + on_b, kStreams);
  ASSERT_GT(on_a, 0);
  ASSERT_GT(on_b, 0);
  const int status = (*group_a)->Stop(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status)) << "wait status " << status;

  // Sent right after the kill, before any RPC to group A failed: none of
  // them may fail (an Open that finds the group dead goes to the other).
  constexpr int kAfter = 8;
  std::vector<v1::GenerateRequest> after;
  for (int i = 0; i < kAfter; ++i) after.push_back(MakeRequest(prompts[i], 16, "none"));
  std::vector<GenerateResult> after_results = RunConcurrently(stub.get(), after);
  for (std::thread& t : streams) t.join();

  int failed = 0;
  for (int i = 0; i < kStreams; ++i) {
    const GenerateResult& r = results[i];
    const auto& want = expected[i % kPrompts];
    if (r.status.ok()) {
      EXPECT_EQ(r.ids, want) << "stream " << i;
      continue;
    }
    ++failed;
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "stream " << i << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(dead)) << "stream " << i;
    ASSERT_LE(r.ids.size(), want.size());
    EXPECT_EQ(r.ids, std::vector<int32_t>(want.begin(), want.begin() + r.ids.size()))
        << "stream " << i << " streamed wrong tokens before failing";
  }
  EXPECT_EQ(failed, on_a) << "only group A's requests fail";
  for (int i = 0; i < kAfter; ++i) {
    ASSERT_TRUE(after_results[i].status.ok())
        << "request " << i << " sent after the kill: " << after_results[i].status.error_message();
    EXPECT_EQ(after_results[i].ids, std::vector<int32_t>(expected[i].begin(),
                                                         expected[i].begin() + 16));
  }
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(stub_b.get()) == 0; }, milliseconds(10000)));
}

// ---------------------------------------------------------------- c

TEST(ChaosTest, DrafterSlowerThanItsDeadlineFallsBackToPlainDecoding) {
  auto drafter = StartDrafterProcess("mamba", kMambaModel, "127.0.0.1:0",
                                     {"--debug_draft_delay_ms", "400"});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  auto worker = InProcessWorker::Start();
  ASSERT_TRUE(worker.ok()) << worker.status();
  CoordinatorConfig cc;
  cc.workers = {(*worker)->address()};
  cc.drafters = {{"mamba", (*drafter)->address()}};
  cc.options.lane.draft_timeout = milliseconds(100);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  constexpr int kTokens = 48;
  const auto prompts = Prompts(500);
  const auto expected = GreedyReference(prompts, kTokens);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kPrompts; ++i) {
    requests.push_back(MakeRequest(prompts[i], kTokens, "mamba", i % 2 ? "chain:4" : ""));
  }
  std::vector<GenerateResult> results = RunConcurrently(stub.get(), requests);
  int64_t fallback = 0;
  for (int i = 0; i < kPrompts; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << "request " << i << ": "
                                        << results[i].status.error_message();
    EXPECT_EQ(results[i].ids, expected[i]) << "request " << i;
    const v1::SpeculationStats& s = results[i].final_chunk.speculation();
    EXPECT_EQ(s.accepted_tokens() + s.steps(), kTokens - 1) << "request " << i;
    fallback += s.fallback_steps();
  }
  EXPECT_GT(fallback, 0) << "no step fell back although every Draft missed its deadline";
}

}  // namespace
}  // namespace treespec::testing
