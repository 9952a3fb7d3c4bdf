// The coordinator's step loop (coordinator/lane.h, step_machine.h, lane_rpc.h)
// driven through Coordinator with in-process fake clients (fake_clients.h): no
// gRPC. Covers drafter failure and recovery, worker failure, cancellation
// mid-step, deadlines, stop strings, the bandit, admission while steps run,
// malformed drafted trees, sequence-id ownership, release retries, seeds and
// shutdown.
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
using testing::kFakeVocab;
using Clock = std::chrono::steady_clock;

// Token i decodes to one letter.
class LetterTokenizer : public Tokenizer {
 public:
  LetterTokenizer() {
    for (int i = 0; i < kFakeVocab; ++i) {
      DecodeRules::Piece p;
      p.kind = DecodeRules::Piece::Kind::kText;
      p.text = std::string(1, static_cast<char>('a' + i % 26));
      decode_rules_.pieces.push_back(p);
    }
    is_special_.assign(kFakeVocab, false);
  }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override {
    return absl::UnimplementedError("ids only");
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s += decode_rules_.pieces[id].text;
    return s;
  }
  int32_t vocab_size() const override { return kFakeVocab; }
};

struct Outcome {
  absl::Status status;
  std::vector<int32_t> ids;
  std::string text;
  v1::GenerateResponse final_chunk;
  bool has_final = false;
  int chunks = 0;
};

Outcome Collect(RequestState* r, absl::Duration timeout = absl::Seconds(20)) {
  Outcome o;
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    v1::GenerateResponse chunk;
    bool done = false;
    absl::Status st;
    if (r->Pop(absl::Milliseconds(20), &chunk, &done, &st)) {
      o.chunks += 1;
      o.ids.insert(o.ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
      o.text += chunk.text();
      if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        o.final_chunk = chunk;
        o.has_final = true;
      }
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

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                            const std::string& drafter = "d", const std::string& tree = "chain:3") {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.set_max_tokens(max_tokens);
  r.mutable_speculation()->set_drafter(drafter);
  r.mutable_speculation()->set_tree(tree);
  r.mutable_sampling()->set_seed(7);
  return r;
}

class LaneTest : public ::testing::Test {
 protected:
  void Start(CoordinatorOptions options = {}, bool tokenizer = false) {
    options.lane.release_retry.initial_backoff = std::chrono::milliseconds(5);
    options.telemetry = &telemetry_;
    std::vector<std::unique_ptr<WorkerClient>> workers;
    workers.push_back(std::make_unique<FakeWorkerClient>(&worker_));
    std::vector<DrafterSpec> drafters;
    drafters.push_back({"d", std::make_unique<FakeDrafterClient>(&drafter_)});
    auto c = Coordinator::Create(options, std::move(workers), std::move(drafters),
                                 tokenizer ? std::make_unique<LetterTokenizer>() : nullptr);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    ASSERT_TRUE(coordinator_->Start().ok());
  }
  std::shared_ptr<RequestState> Submit(
      const v1::GenerateRequest& r, std::optional<Clock::time_point> deadline = std::nullopt) {
    auto s = coordinator_->Submit(r, Clock::now(), deadline);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }
  uint64_t Counter(CounterFamily* f, std::vector<std::string> labels) {
    return f->WithLabels(labels)->value();
  }

  FakeWorker worker_;
  FakeDrafter drafter_;
  MetricsRegistry registry_;
  CoordinatorTelemetry telemetry_{&registry_, nullptr};
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(LaneTest, PlainAndSpeculativeStreamsEqualTheTargetsGreedyOutput) {
  Start();
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (const char* drafter : {"none", "d"}) {
    Outcome o = Collect(Submit(Request(prompt, 40, drafter)).get());
    ASSERT_TRUE(o.status.ok()) << drafter << ": " << o.status;
    EXPECT_EQ(o.ids, FakeReference(prompt, 40)) << drafter;
    ASSERT_TRUE(o.has_final);
    const v1::SpeculationStats& sp = o.final_chunk.speculation();
    EXPECT_EQ(o.final_chunk.usage().completion_tokens(), 40);
    if (std::string(drafter) == "d") {
      // A perfect chain:3 drafter: 4 tokens per step after the first token.
      EXPECT_EQ(sp.accepted_tokens(), sp.drafted_tokens());
      EXPECT_GT(sp.accepted_tokens(), 0);
      EXPECT_LE(sp.steps(), 12);
      EXPECT_EQ(sp.tree(), "chain:3");
      EXPECT_EQ(sp.fallback_steps(), 0);
    } else {
      EXPECT_EQ(sp.steps(), 39);
      EXPECT_EQ(sp.drafted_tokens(), 0);
    }
  }
}

TEST_F(LaneTest, DrafterFailureFallsBackToPlainStepsAndRecovers) {
  Start();
  worker_.verify_delay_ms = 2;
  const std::vector<int32_t> prompt = {5, 6};
  std::shared_ptr<RequestState> r = Submit(Request(prompt, 400));
  std::thread heal([&] {
    while (worker_.num_verifies() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drafter_.mode = FakeDrafter::Mode::kFailRpc;
    while (worker_.num_verifies() < 25) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drafter_.mode = FakeDrafter::Mode::kGood;
  });
  Outcome o = Collect(r.get());
  heal.join();
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference(prompt, 400)) << "the client sees the same tokens";
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  EXPECT_GE(sp.fallback_steps(), 20);
  EXPECT_GT(sp.drafter_errors(), 0);
  EXPECT_GE(drafter_.num_opened(), 2) << "re-opened once the drafter answered";
  EXPECT_GT(sp.accepted_tokens(), 0) << "drafting resumed";
  EXPECT_EQ(worker_.num_bad_trees(), 0);
}

TEST_F(LaneTest, WorkerFailureEndsTheSequenceWithUnavailableNamingTheWorker) {
  Start();
  worker_.verify_delay_ms = 2;
  std::shared_ptr<RequestState> r = Submit(Request({1}, 1000));
  std::thread fail([&] {
    while (worker_.num_verifies() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    worker_.fail_verify = true;
  });
  Outcome o = Collect(r.get());
  fail.join();
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable) << o.status;
  EXPECT_NE(o.status.message().find("fake-worker"), std::string::npos) << o.status;
  EXPECT_FALSE(o.has_final);
}

TEST_F(LaneTest, CancelMidStepEndsOnlyThatRequestAndReleasesIt) {
  Start();
  worker_.verify_delay_ms = 20;
  std::shared_ptr<RequestState> a = Submit(Request({1, 2}, 1000));
  std::shared_ptr<RequestState> b = Submit(Request({3, 4}, 30));
  ASSERT_TRUE(a && b);
  while (worker_.num_verifies() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  a->Cancel();  // a Verify is in flight
  Outcome oa = Collect(a.get());
  Outcome ob = Collect(b.get());
  EXPECT_EQ(oa.status.code(), absl::StatusCode::kCancelled) << oa.status;
  ASSERT_TRUE(ob.status.ok()) << ob.status;
  EXPECT_EQ(ob.ids, FakeReference({3, 4}, 30));
  const std::vector<uint64_t> ids = worker_.opened_ids();
  ASSERT_EQ(ids.size(), 2u);
  for (uint64_t id : ids) {
    EXPECT_TRUE(testing::Eventually([&] { return worker_.released(id); }, std::chrono::seconds(5)))
        << "sequence " << id;
  }
}

TEST_F(LaneTest, DeadlineEndsStreamsMidWayAndWhileQueued) {
  CoordinatorOptions options;
  options.max_batch = 1;
  Start(options);
  worker_.verify_delay_ms = 10;
  std::shared_ptr<RequestState> live =
      Submit(Request({1}, 1000), Clock::now() + std::chrono::milliseconds(200));
  std::shared_ptr<RequestState> queued =
      Submit(Request({2}, 10), Clock::now() + std::chrono::milliseconds(50));
  Outcome ol = Collect(live.get());
  Outcome oq = Collect(queued.get());
  EXPECT_EQ(ol.status.code(), absl::StatusCode::kDeadlineExceeded) << ol.status;
  EXPECT_GT(ol.ids.size(), 0u) << "it streamed before the deadline";
  EXPECT_EQ(oq.status.code(), absl::StatusCode::kDeadlineExceeded) << oq.status;
  EXPECT_NE(oq.status.message().find("queued"), std::string::npos) << oq.status;
}

TEST_F(LaneTest, StopStringEndsTheStreamBeforeIt) {
  Start({}, /*tokenizer=*/true);
  const std::vector<int32_t> prompt = {9};
  const std::vector<int32_t> ref = FakeReference(prompt, 60);
  LetterTokenizer tok;
  const std::string full = tok.Decode(ref);
  const std::string stop = full.substr(10, 3);
  const size_t at = full.find(stop);
  v1::GenerateRequest req = Request(prompt, 60);
  req.add_stop(stop);
  Outcome o = Collect(Submit(req).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.text, full.substr(0, at)) << "stop '" << stop << "'";
  EXPECT_EQ(o.final_chunk.finish_reason(), v1::FINISH_REASON_STOP_STRING);
}

TEST_F(LaneTest, BanditLearnsTheDeepestChainFromAcceptedLengths) {
  CoordinatorOptions options;
  options.bandit_trees = "chain:1;chain:6";
  options.lane.plan_auto = false;
  Start(options);
  Outcome o = Collect(Submit(Request({4}, 300, "d", "auto")).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({4}, 300));
  std::map<std::string, int> shapes = drafter_.shapes();
  EXPECT_GT(shapes["chain:1"], 0) << "UCB explores every arm";
  EXPECT_GT(shapes["chain:6"], 2 * shapes["chain:1"])
      << "a perfect drafter makes the deep chain pay: " << shapes["chain:6"] << " vs "
      << shapes["chain:1"];
  EXPECT_EQ(o.final_chunk.speculation().tree(), "chain:6");
}

int TotalDrafts(const std::map<std::string, int>& shapes) {
  int n = 0;
  for (const auto& [shape, count] : shapes) n += count;
  return n;
}

TEST_F(LaneTest, AutoWithAPerfectDrafterChoosesDeepTrees) {
  Start();  // tree "auto" is the default
  Outcome o = Collect(Submit(Request({4}, 300, "d", "")).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({4}, 300));
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  EXPECT_EQ(sp.planned_steps(), sp.steps()) << "every step is planned";
  // The planner's measured check decodes 1 planned step in check_every (16)
  // plainly by design, on top of the first step and the budget's last ones.
  EXPECT_LT(sp.plain_steps(), sp.steps() / 5 + sp.steps() / 16)
      << "trees pay: " << sp.DebugString();
  EXPECT_GT(sp.mean_accepted_length(), 3.0) << sp.DebugString();
  EXPECT_GT(sp.planned_expected_tokens(), 1.5) << sp.DebugString();
  EXPECT_GT(sp.planned_committed_tokens(), 3.0) << sp.DebugString();
  EXPECT_GT(TotalDrafts(drafter_.shapes()), sp.steps() * 3 / 4);
}

TEST_F(LaneTest, AutoWithAUselessDrafterStopsCallingIt) {
  drafter_.mode = FakeDrafter::Mode::kUseless;
  Start();
  Outcome o = Collect(Submit(Request({4}, 300, "d", "auto")).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({4}, 300));
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  EXPECT_EQ(sp.accepted_tokens(), 0);
  EXPECT_EQ(sp.planned_steps(), sp.steps());
  const int drafts = TotalDrafts(drafter_.shapes());
  EXPECT_LT(drafts, sp.steps() / 5) << "the planner stops calling a useless drafter: " << drafts
                                    << " drafts in " << sp.steps() << " steps";
  EXPECT_EQ(sp.plain_steps(), sp.steps() - drafts);
  EXPECT_NEAR(sp.planned_committed_tokens(), 1.0, 1e-9);
}

TEST_F(LaneTest, WhileAUselessDrafterLosesFewSequencesOpenOnIt) {
  drafter_.mode = FakeDrafter::Mode::kUseless;
  // Slow as well (20 ms a level), so that no tree can seem to pay, not even
  // to the acceptance model's optimism at a larger batch: a plan that
  // speculates would rightly open the deferred sequences (under TSan that
  // happened, 12 opens).
  drafter_.draft_ns_per_level = 20'000'000;
  Start();
  Outcome first = Collect(Submit(Request({4}, 300, "d", "auto")).get());
  ASSERT_TRUE(first.status.ok()) << first.status;
  const int opened = drafter_.num_opened();
  // The planner now decodes plainly: of sixteen concurrent requests only a
  // check's worth (8) get drafter state, and all stream the plain output.
  // (Slow steps, so that none ends before the last is admitted: a finished
  // one's drafter state no longer counts.)
  worker_.verify_delay_ms = 1;
  std::vector<std::shared_ptr<RequestState>> rs;
  for (int i = 0; i < 16; ++i) rs.push_back(Submit(Request({5 + i}, 80, "d", "auto")));
  for (int i = 0; i < 16; ++i) {
    Outcome o = Collect(rs[i].get());
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids, FakeReference({5 + i}, 80)) << "request " << i;
  }
  EXPECT_LE(drafter_.num_opened() - opened, 8);
  EXPECT_GE(drafter_.num_opened() - opened, 1) << "checks keep a few sequences drafting";
}

TEST_F(LaneTest, SampledAutoRequestsKeepTheirReproducibleBandit) {
  Start();
  v1::GenerateRequest r = Request({4}, 60, "d", "auto");
  r.mutable_sampling()->set_temperature(0.8f);
  Outcome o = Collect(Submit(r).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  EXPECT_EQ(sp.planned_steps(), 0) << "the planner depends on timing; a seed must reproduce";
  EXPECT_GT(TotalDrafts(drafter_.shapes()), 0);
}

TEST_F(LaneTest, SampledAutoWithAUselessDrafterDecodesPlainly) {
  drafter_.mode = FakeDrafter::Mode::kUseless;
  Start();
  v1::GenerateRequest r = Request({4}, 80, "d", "auto");
  r.mutable_sampling()->set_temperature(1.0f);
  Outcome o = Collect(Submit(r).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  const int drafts = TotalDrafts(drafter_.shapes());
  EXPECT_GT(drafts, 0) << "an optimistic start tries the drafter";
  EXPECT_LE(drafts, 6) << "the sequence's bandit settles on plain: " << drafts << " drafts in "
                       << sp.steps() << " steps";
  EXPECT_EQ(sp.plain_steps(), sp.steps() - drafts);
}

TEST_F(LaneTest, AnExplicitShapeIsHonouredExactly) {
  drafter_.mode = FakeDrafter::Mode::kUseless;  // auto would drop it; a named shape is kept
  Start();
  Outcome o = Collect(Submit(Request({4}, 40, "d", "3,2,2,1,1")).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  std::map<std::string, int> shapes = drafter_.shapes();
  EXPECT_GE(shapes["3,2,2,1,1"], sp.steps() - 5) << "every step drafts the named shape";
  for (const auto& [shape, count] : shapes) {
    EXPECT_TRUE(absl::StartsWith("3,2,2,1,1", shape)) << shape << " is not cut to the budget";
  }
  EXPECT_EQ(sp.planned_steps(), 0);
  EXPECT_LE(sp.plain_steps(), 1) << "only the last step, with no budget for a draft";
}

TEST_F(LaneTest, AdmissionDoesNotStopLiveStreams) {
  Start();
  worker_.verify_delay_ms = 2;
  // Both in the same lane (same worker and drafter).
  std::shared_ptr<RequestState> a = Submit(Request({1}, 2000));
  while (worker_.num_verifies() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int drafter_opens = drafter_.num_opened();
  worker_.HoldOpens(true);  // b's prefill takes as long as the test wants
  std::shared_ptr<RequestState> b = Submit(Request({2}, 10));
  ASSERT_TRUE(testing::Eventually([&] { return worker_.opens_in_flight() == 1; },
                                  std::chrono::seconds(5)));
  EXPECT_TRUE(testing::Eventually([&] { return drafter_.num_opened() == drafter_opens + 1; },
                                  std::chrono::seconds(5)))
      << "the drafter's Open does not wait for the worker's";
  const int before = worker_.num_verifies();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(worker_.num_verifies() - before, 10) << "steps went on during the admission";
  EXPECT_EQ(coordinator_->NumWaiting(), 1) << "b waits for its Open";
  worker_.HoldOpens(false);
  Outcome ob = Collect(b.get());
  ASSERT_TRUE(ob.status.ok()) << ob.status;
  EXPECT_EQ(ob.ids, FakeReference({2}, 10));
  a->Cancel();
  EXPECT_EQ(Collect(a.get()).status.code(), absl::StatusCode::kCancelled);
}

// The admission queue's limit counts requests somebody waits for: one its
// client cancelled while its Open is in flight frees its place at once, even
// while the lane thread is inside a long step and has not reaped it yet (a
// closed-loop client that cancels and sends its next request must not get
// RESOURCE_EXHAUSTED; found by tools/bench/soak_bench at 256 streams).
TEST_F(LaneTest, CancelledRequestsFreeTheirQueuePlaceAtOnce) {
  CoordinatorOptions options;
  options.max_queue = 2;
  Start(options);
  std::shared_ptr<RequestState> live = Submit(Request({1}, 1000));
  ASSERT_TRUE(live);
  while (worker_.num_verifies() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  worker_.HoldOpens(true);
  worker_.verify_delay_ms = 300;  // the lane thread spends its time in Verify
  absl::Cleanup release = [&] {
    worker_.verify_delay_ms = 0;
    worker_.HoldOpens(false);
  };
  std::shared_ptr<RequestState> a = Submit(Request({2}, 10));
  std::shared_ptr<RequestState> b = Submit(Request({3}, 10));
  ASSERT_TRUE(a && b);
  // Both admitted (one Open RPC in flight, held) and counted as waiting.
  ASSERT_TRUE(testing::Eventually(
      [&] { return worker_.opens_in_flight() == 1 && coordinator_->NumWaiting() == 2; },
      std::chrono::seconds(5)))
      << worker_.opens_in_flight() << " opens in flight, " << coordinator_->NumWaiting()
      << " waiting";
  auto full = coordinator_->Submit(Request({4}, 10), Clock::now(), std::nullopt);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  a->Cancel();
  EXPECT_EQ(coordinator_->NumWaiting(), 1);
  auto c = coordinator_->Submit(Request({5}, 10), Clock::now(), std::nullopt);
  EXPECT_TRUE(c.ok()) << "a cancelled request still held its place: " << c.status();
  std::move(release).Invoke();
  EXPECT_EQ(Collect(a.get()).status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Collect(b.get()).status.ok());
  if (c.ok()) EXPECT_TRUE(Collect(c->get()).status.ok());
  live->Cancel();
  EXPECT_EQ(Collect(live.get()).status.code(), absl::StatusCode::kCancelled);
}

TEST_F(LaneTest, MalformedDraftIsAPlainStepAndADrafterErrorNeverTheClients) {
  Start();
  drafter_.mode = FakeDrafter::Mode::kMalformed;
  Outcome o = Collect(Submit(Request({7, 8}, 20)).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, FakeReference({7, 8}, 20));
  const v1::SpeculationStats& sp = o.final_chunk.speculation();
  // Every step drafts but the last (no room left in max_tokens) and maybe the
  // first (the drafter may still be opening).
  EXPECT_GE(sp.drafter_errors(), sp.steps() - 2);
  EXPECT_EQ(sp.fallback_steps(), sp.drafter_errors());
  EXPECT_EQ(sp.drafted_tokens(), 0);
  EXPECT_EQ(worker_.num_bad_trees(), 0) << "the malformed tree never reached the worker";
  EXPECT_EQ(Counter(telemetry_.drafter_errors, {"d", "invalid_tree"}),
            static_cast<uint64_t>(sp.drafter_errors()));
}

TEST_F(LaneTest, FailedReleasesAreRetried) {
  Start();
  worker_.release_failures = 2;
  Outcome o = Collect(Submit(Request({3}, 5)).get());
  ASSERT_TRUE(o.status.ok()) << o.status;
  ASSERT_EQ(worker_.opened_ids().size(), 1u);
  const uint64_t id = worker_.opened_ids()[0];
  EXPECT_TRUE(testing::Eventually([&] { return worker_.released(id); }, std::chrono::seconds(5)));
  EXPECT_GE(worker_.num_release_calls(), 3);
}

TEST_F(LaneTest, UnsetSeedIsFreshPerRequestAndReturnedGivenSeedIsKept) {
  Start();
  std::set<uint64_t> seen;
  for (int i = 0; i < 3; ++i) {
    v1::GenerateRequest r = Request({1}, 3, "none");
    r.mutable_sampling()->clear_seed();
    r.mutable_sampling()->set_temperature(1.0f);
    Outcome o = Collect(Submit(r).get());
    ASSERT_TRUE(o.status.ok()) << o.status;
    ASSERT_TRUE(o.final_chunk.has_seed());
    seen.insert(o.final_chunk.seed());
    EXPECT_EQ(static_cast<uint64_t>(worker_.seeds().back()), o.final_chunk.seed())
        << "the worker samples with the returned seed";
  }
  EXPECT_EQ(seen.size(), 3u) << "three unseeded requests, three seeds";
  v1::GenerateRequest r = Request({1}, 3, "none");
  r.mutable_sampling()->set_seed(0);
  Outcome o = Collect(Submit(r).get());
  EXPECT_EQ(o.final_chunk.seed(), 0u) << "seed 0 is a given seed";
  EXPECT_EQ(worker_.seeds().back(), 0);
}

TEST_F(LaneTest, ShutdownEndsQueuedOpeningAndLiveRequestsWithUnavailable) {
  CoordinatorOptions options;
  options.max_batch = 2;
  Start(options);
  worker_.verify_delay_ms = 5;
  std::shared_ptr<RequestState> live = Submit(Request({1}, 4000));
  while (worker_.num_verifies() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  worker_.HoldOpens(true);
  std::shared_ptr<RequestState> opening = Submit(Request({2}, 10));
  ASSERT_TRUE(testing::Eventually([&] { return worker_.opens_in_flight() == 1; },
                                  std::chrono::seconds(5)));
  std::shared_ptr<RequestState> queued1 = Submit(Request({3}, 10));
  std::shared_ptr<RequestState> queued2 = Submit(Request({4}, 10));
  std::thread shutdown([&] { coordinator_->Shutdown(); });
  for (RequestState* r : {live.get(), opening.get(), queued1.get(), queued2.get()}) {
    Outcome o = Collect(r, absl::Seconds(5));
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable) << o.status;
    EXPECT_EQ(o.status.message(), "server shutting down");
  }
  worker_.HoldOpens(false);
  shutdown.join();
  EXPECT_EQ(worker_.num_open(), 0) << "the lane released what it had opened";
  EXPECT_EQ(coordinator_->Submit(Request({5}, 1), Clock::now(), std::nullopt).status().code(),
            absl::StatusCode::kUnavailable);
}

// Two coordinators on one worker: their ids never collide.
TEST(CoordinatorReplicasTest, TwoCoordinatorsShareOneWorker) {
  FakeWorker worker;
  worker.verify_delay_ms = 1;
  std::vector<std::unique_ptr<Coordinator>> cs;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::unique_ptr<WorkerClient>> workers;
    workers.push_back(std::make_unique<FakeWorkerClient>(&worker));
    auto c = Coordinator::Create({}, std::move(workers), {}, nullptr);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->Start().ok());
    cs.push_back(std::move(*c));
  }
  std::vector<std::shared_ptr<RequestState>> reqs;
  for (int i = 0; i < 6; ++i) {
    auto r = cs[i % 2]->Submit(Request({i + 1}, 30, "none", ""), Clock::now(), std::nullopt);
    ASSERT_TRUE(r.ok()) << r.status();
    reqs.push_back(*r);
  }
  for (int i = 0; i < 6; ++i) {
    Outcome o = Collect(reqs[i].get());
    EXPECT_TRUE(o.status.ok()) << "request " << i << ": " << o.status;
    EXPECT_EQ(o.ids, FakeReference({i + 1}, 30)) << "request " << i;
  }
}

// Even when ids do collide (two lanes counting from the same value), a lane
// whose Open was refused never releases the other's sequence.
TEST(LaneOwnershipTest, RefusedOpenNeverReleasesAnotherOwnersSequence) {
  FakeWorker worker;
  worker.verify_delay_ms = 2;
  WorkerEndpoint endpoint;
  endpoint.name = "fake-worker";
  endpoint.client = std::make_unique<FakeWorkerClient>(&worker);
  std::atomic<uint64_t> ids_a{100}, ids_b{100};
  LaneOptions oa, ob;
  oa.next_sequence_id = &ids_a;
  ob.next_sequence_id = &ids_b;
  Lane a(&endpoint, nullptr, oa), b(&endpoint, nullptr, ob);
  GenerationRequest g;
  g.prompt = {1};
  g.max_tokens = 200;
  g.drafter = "none";
  auto ra = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
  a.Add(ra);
  while (worker.num_verifies() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g.prompt = {2};
  auto rb = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
  b.Add(rb);
  Outcome obt = Collect(rb.get());
  EXPECT_EQ(obt.status.code(), absl::StatusCode::kAlreadyExists) << obt.status;
  Outcome oat = Collect(ra.get());
  EXPECT_TRUE(oat.status.ok()) << "a's sequence survived b's failed Open: " << oat.status;
  EXPECT_EQ(oat.ids, FakeReference({1}, 200));
}

}  // namespace
}  // namespace treespec
