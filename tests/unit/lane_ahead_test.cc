// Draft-ahead through the lane (coordinator/lane.h, step_machine.h,
// lane_rpc.h) with in-process fakes (fake_clients.h), no gRPC: hits replace
// Draft calls and commit with the next call, misses and partial hits in a
// batch draft normally, a drafter that fails or is slow mid-ahead, one that
// does not draft ahead, and cancellation while an ahead call is in flight.
// Every stream must equal the target's greedy output.
#include <thread>

#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "tests/unit/fake_clients.h"

namespace treespec {
namespace {

using testing::FakeDrafter;
using testing::FakeDrafterClient;
using testing::FakeReference;
using testing::FakeWorker;
using testing::FakeWorkerClient;
using Clock = std::chrono::steady_clock;

struct Outcome {
  absl::Status status;
  std::vector<int32_t> ids;
  v1::SpeculationStats stats;
};

Outcome Collect(RequestState* r) {
  Outcome o;
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until) {
    v1::GenerateResponse chunk;
    bool done = false;
    absl::Status st;
    if (r->Pop(absl::Milliseconds(20), &chunk, &done, &st)) {
      o.ids.insert(o.ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
      if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) o.stats = chunk.speculation();
      continue;
    }
    if (done) {
      o.status = st;
      return o;
    }
  }
  o.status = absl::DeadlineExceededError("test: the stream did not end");
  return o;
}

class LaneAheadTest : public ::testing::Test {
 protected:
  void Start() {
    CoordinatorOptions options;
    options.lane.release_retry.initial_backoff = std::chrono::milliseconds(5);
    std::vector<std::unique_ptr<WorkerClient>> workers;
    workers.push_back(std::make_unique<FakeWorkerClient>(&worker_));
    std::vector<DrafterSpec> drafters;
    drafters.push_back({"d", std::make_unique<FakeDrafterClient>(&drafter_)});
    auto c = Coordinator::Create(options, std::move(workers), std::move(drafters), nullptr);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    ASSERT_TRUE(coordinator_->Start().ok());
  }
  std::shared_ptr<RequestState> Submit(const std::vector<int32_t>& prompt, int max_tokens,
                                       const std::string& tree = "chain:3") {
    v1::GenerateRequest r;
    r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
    r.set_max_tokens(max_tokens);
    r.mutable_speculation()->set_drafter("d");
    r.mutable_speculation()->set_tree(tree);
    auto s = coordinator_->Submit(r, Clock::now(), std::nullopt);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }
  int Drafts() {
    int n = 0;
    for (const auto& [shape, count] : drafter_.shapes()) n += count;
    return n;
  }

  FakeWorker worker_;
  FakeDrafter drafter_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(LaneAheadTest, HitsVerifyCandidatesWithoutDraftCalls) {
  Start();
  Outcome o = Collect(Submit({4}, 121).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({4}, 121));
  const v1::SpeculationStats& s = o.stats;
  EXPECT_EQ(s.steps(), 30) << "a perfect chain:3 commits 4 tokens a step";
  EXPECT_EQ(s.draft_ahead_steps(), 29) << "every step after the first was asked for";
  EXPECT_EQ(s.draft_ahead_hits(), 29) << s.DebugString();
  EXPECT_EQ(drafter_.commits(), 29) << "each hit is committed once";
  EXPECT_EQ(Drafts(), 1 + 29) << "one Draft call, then only commits";
  EXPECT_GT(s.draft_ahead_saved_ms(), 0.0);
  EXPECT_EQ(s.drafter_errors(), 0);
  EXPECT_EQ(worker_.num_bad_trees(), 0);
}

TEST_F(LaneAheadTest, MissesAndPartialHitsDraftNormally) {
  drafter_.ahead_miss_every = 3;
  Start();
  std::vector<std::shared_ptr<RequestState>> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(Submit({static_cast<int32_t>(4 + i)}, 81));
  int hits = 0, asked = 0;
  for (int i = 0; i < 3; ++i) {
    Outcome o = Collect(reqs[i].get());
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids, FakeReference({static_cast<int32_t>(4 + i)}, 81)) << "request " << i;
    hits += o.stats.draft_ahead_hits();
    asked += o.stats.draft_ahead_steps();
  }
  EXPECT_GT(hits, 0);
  EXPECT_LT(hits, asked) << "every third item misses";
  EXPECT_EQ(drafter_.commits(), hits);
  EXPECT_EQ(worker_.num_bad_trees(), 0);
}

TEST_F(LaneAheadTest, ADrafterFailingMidAheadFallsBackAndRecovers) {
  Start();
  worker_.verify_delay_ms = 2;
  std::shared_ptr<RequestState> r = Submit({5, 6}, 400);
  std::thread flaky([&] {
    while (worker_.num_verifies() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drafter_.fail_ahead = true;  // the next commit is lost with its call
    while (worker_.num_verifies() < 25) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drafter_.fail_ahead = false;
  });
  Outcome o = Collect(r.get());
  flaky.join();
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({5, 6}, 400)) << "the client sees the same tokens";
  EXPECT_GT(o.stats.drafter_errors(), 0);
  EXPECT_GE(drafter_.num_opened(), 2) << "re-opened: its state was unknown";
  EXPECT_GT(o.stats.draft_ahead_hits(), 10) << "draft-ahead resumed";
  EXPECT_EQ(worker_.num_bad_trees(), 0);
}

TEST_F(LaneAheadTest, ASlowAheadCallIsWaitedForAndCounted) {
  drafter_.ahead_delay_ms = 5;
  Start();
  Outcome o = Collect(Submit({7}, 41).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({7}, 41));
  EXPECT_EQ(o.stats.draft_ahead_hits(), o.stats.steps() - 1);
  EXPECT_GT(o.stats.draft_ahead_wait_ms(), 4.0 * (o.stats.steps() - 1)) << o.stats.DebugString();
}

TEST_F(LaneAheadTest, ADrafterThatDoesNotDraftAheadIsNeverAsked) {
  drafter_.ahead_candidates = 0;
  Start();
  Outcome o = Collect(Submit({8}, 41).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({8}, 41));
  EXPECT_EQ(drafter_.ahead_items(), 0);
  EXPECT_EQ(drafter_.commits(), 0);
  EXPECT_EQ(o.stats.draft_ahead_steps(), 0);
  EXPECT_EQ(Drafts(), o.stats.steps());
}

TEST_F(LaneAheadTest, CancelWhileAnAheadCallIsInFlight) {
  drafter_.ahead_delay_ms = 30;
  Start();
  std::shared_ptr<RequestState> a = Submit({1, 2}, 1000);
  std::shared_ptr<RequestState> b = Submit({3, 4}, 40);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(testing::Eventually([&] { return drafter_.ahead_items() >= 2; },
                                  std::chrono::seconds(10)));
  a->Cancel();  // an ahead call (30 ms) is in flight
  Outcome oa = Collect(a.get());
  Outcome ob = Collect(b.get());
  EXPECT_EQ(oa.status.code(), absl::StatusCode::kCancelled) << oa.status;
  ASSERT_TRUE(ob.status.ok()) << ob.status;
  EXPECT_EQ(ob.ids, FakeReference({3, 4}, 40));
  for (uint64_t id : worker_.opened_ids()) {
    EXPECT_TRUE(testing::Eventually([&] { return worker_.released(id); }, std::chrono::seconds(5)))
        << "sequence " << id;
  }
}

}  // namespace
}  // namespace treespec
