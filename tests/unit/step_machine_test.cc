// The proto-free step machine (coordinator/step_machine.h) driven by hand:
// what it plans, how it applies replies, what it owns and releases. Also the
// client layer's check of drafted trees (lane_rpc.h) and the release retry
// queue (release_queue.h).
#include "coordinator/step_machine.h"

#include <cmath>
#include <functional>
#include <map>

#include "coordinator/lane_rpc.h"
#include "coordinator/release_queue.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

// Prompt {1, 2}, drafter "d", tree "auto".
std::shared_ptr<RequestState> AutoRequest(float temperature, int max_tokens) {
  GenerationRequest g;
  g.prompt = {1, 2};
  g.max_tokens = max_tokens;
  g.drafter = "d";
  g.auto_tree = true;
  g.sampling.temperature = temperature;
  return std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
}

class StepMachineTest : public ::testing::Test {
 protected:
  StepMachineTest() {
    StepMachineOptions o;
    o.next_sequence_id = [this] { return next_id_++; };
    o.on_finish = [this] { finished_ += 1; };
    o.worker_name = "w0";
    machine_ = std::make_unique<StepMachine>(o);
  }
  std::shared_ptr<RequestState> Req(std::vector<int32_t> prompt, int max_tokens,
                                    std::string tree = "chain:2") {
    GenerationRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.drafter = tree.empty() ? "none" : "d";
    if (!tree.empty()) g.tree = *TreeShape::Parse(tree);
    auto r = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
    reqs_.push_back(r);
    return r;
  }
  // Prompt {1, 2}, 40 tokens, drafter "d", tree "auto".
  std::shared_ptr<RequestState> AutoReq(float temperature) {
    reqs_.push_back(AutoRequest(temperature, 40));
    return reqs_.back();
  }
  static absl::Status Popped(RequestState* r, std::vector<int32_t>* ids) {
    v1::GenerateResponse c;
    bool done = false;
    absl::Status st = absl::UnknownError("not finished");
    while (r->Pop(absl::ZeroDuration(), &c, &done, &st)) {
      ids->insert(ids->end(), c.token_ids().begin(), c.token_ids().end());
    }
    return done ? st : absl::UnknownError("not finished");
  }

  uint64_t next_id_ = 10;
  int finished_ = 0;
  std::vector<std::shared_ptr<RequestState>> reqs_;
  std::unique_ptr<StepMachine> machine_;
};

TEST_F(StepMachineTest, SequenceStepsOnceBothOpensReturned) {
  auto r = Req({1, 2, 3}, 20);
  StepMachine::Admission a = machine_->Admit({r}, Clock::now(), /*drafter_may_try=*/true);
  ASSERT_EQ(a.worker.size(), 1u);
  ASSERT_EQ(a.drafter.size(), 1u) << "worker and drafter open together";
  EXPECT_EQ(a.drafter[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(machine_->num_opening(), 1);
  EXPECT_TRUE(machine_->PlanVerify().empty()) << "not stepping before its worker Open";
  machine_->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 40}},
                           Clock::now());
  std::vector<int32_t> ids;
  EXPECT_EQ(Popped(r.get(), &ids).code(), absl::StatusCode::kUnknown) << "still running";
  EXPECT_EQ(ids, std::vector<int32_t>{40}) << "the first token streams at once";
  // The drafter is still opening: no step yet, so the trees do not depend on
  // which Open was faster.
  EXPECT_EQ(machine_->num_live(), 0);
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  EXPECT_TRUE(machine_->PlanVerify().empty());
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  EXPECT_EQ(machine_->num_live(), 1);
  std::vector<DraftItem> d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].new_tokens, std::vector<int32_t>{40});
  EXPECT_EQ(d[0].step, 1u);
  EXPECT_EQ(d[0].shape, "chain:2");
  machine_->ApplyDrafts(std::vector<DraftReply>{{absl::OkStatus(), absl::OkStatus(), 3, 40}});
  std::vector<VerifyItem> v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].drafted);
  EXPECT_EQ(v[0].root, 40);
  EXPECT_EQ(v[0].step, 1u);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {41, 42, 43}, 2}});
  // Next draft: only what the last step committed.
  d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].new_tokens, (std::vector<int32_t>{41, 42, 43}));
  EXPECT_EQ(d[0].step, 2u);
  // The Draft RPC fails: a plain step, then the drafter is re-opened with
  // everything but the pending token, and gets the rest with its next draft.
  machine_->ApplyDrafts(absl::UnavailableError("drafter down"));
  v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].drafted);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {44}, 0}});
  std::vector<DrafterOpenItem> reopen = machine_->PlanDrafterOpens(Clock::now());
  ASSERT_EQ(reopen.size(), 1u);
  EXPECT_TRUE(reopen[0].release_first) << "state may exist under the id";
  EXPECT_EQ(reopen[0].prompt, (std::vector<int32_t>{1, 2, 3, 40, 41, 42, 43}));
  EXPECT_EQ(machine_->num_live(), 1) << "it keeps stepping while the drafter re-opens";
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  machine_->ApplyDrafts(std::vector<DraftReply>{});
  EXPECT_EQ(machine_->PlanVerify().size(), 1u);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {45}, 0}});
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].new_tokens, (std::vector<int32_t>{44, 45}));
  EXPECT_EQ(d[0].step, 1u);
  ids.clear();
  Popped(r.get(), &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{41, 42, 43, 44, 45}));
}

TEST_F(StepMachineTest, DraftOutcomesAndTheRecordTotals) {
  auto r = Req({1}, 5);
  machine_->Admit({r}, Clock::now(), true);
  machine_->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 2}}, Clock::now());
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  // A malformed tree: plain step, drafter error, drafter state kept.
  ASSERT_EQ(machine_->PlanDrafts().size(), 1u);
  machine_->ApplyDrafts(std::vector<DraftReply>{
      {absl::OkStatus(), absl::InvalidArgumentError("drafted tree: tokens[1] 99"), 3, 2}});
  std::vector<VerifyItem> v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].drafted);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {3}, 0}});
  // A tree rooted elsewhere: plain step, not a drafter error.
  ASSERT_EQ(machine_->PlanDrafts().size(), 1u);
  machine_->ApplyDrafts(std::vector<DraftReply>{{absl::OkStatus(), absl::OkStatus(), 3, 7}});
  EXPECT_FALSE(machine_->PlanVerify()[0].drafted);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {4}, 0}});
  // Two tokens left: chain:2 is cut to chain:1.
  std::vector<DraftItem> d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].shape, "chain:1");
  machine_->ApplyDrafts(std::vector<DraftReply>{{absl::OkStatus(), absl::OkStatus(), 2, 4}});
  EXPECT_TRUE(machine_->PlanVerify()[0].drafted);
  machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {5, 6}, 1}});
  std::vector<int32_t> ids;
  ASSERT_TRUE(Popped(r.get(), &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(finished_, 1);
}

TEST_F(StepMachineTest, ReleasesOnlyWhatItOwns) {
  auto a = Req({1}, 5, ""), b = Req({2}, 5, ""), c = Req({3}, 5, "");
  machine_->Admit({a, b}, Clock::now(), false);
  machine_->Admit({c}, Clock::now(), false);
  // a opened, b refused ("already open": someone else's), c's RPC failed
  // (unknown outcome: the id is ours, so it is released).
  machine_->OnWorkerOpened(
      {10, 11},
      std::vector<WorkerOpenReply>{{absl::OkStatus(), 5},
                                   {absl::AlreadyExistsError("sequence_id 11 is already open"), 0}},
      Clock::now());
  machine_->OnWorkerOpened({12}, absl::UnavailableError("deadline"), Clock::now());
  a->Cancel();
  StepMachine::Released rel = machine_->Reap(Clock::now());
  EXPECT_EQ(rel.worker, (std::vector<uint64_t>{10, 12}));
  EXPECT_TRUE(rel.drafter.empty());
  std::vector<int32_t> ids;
  EXPECT_EQ(Popped(b.get(), &ids).code(), absl::StatusCode::kAlreadyExists);
  absl::Status st = Popped(c.get(), &ids);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("worker w0"), std::string::npos) << st;
  EXPECT_EQ(machine_->size(), 0);
}

// A worker Open that failed as a whole with UNAVAILABLE (the group is down)
// offers the request to `reroute` before failing it: taken, it leaves this
// machine without a final status (another lane streams it) and its id is
// still released here; refused, or another failure code, it fails.
TEST(StepMachineRerouteTest, UnavailableOpenIsReroutedBeforeItFails) {
  std::vector<std::shared_ptr<RequestState>> offered;
  bool take = true;
  int finished = 0;
  uint64_t next_id = 10;
  StepMachineOptions o;
  o.next_sequence_id = [&] { return next_id++; };
  o.on_finish = [&] { finished += 1; };
  o.worker_name = "w0";
  o.has_drafter = false;
  o.reroute = [&](const std::shared_ptr<RequestState>& r) {
    offered.push_back(r);
    return take;
  };
  StepMachine m(o);
  auto req = [] {
    GenerationRequest g;
    g.prompt = {1, 2};
    g.max_tokens = 5;
    g.drafter = "none";
    return std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
  };
  auto a = req(), b = req(), c = req();
  m.Admit({a, b, c}, Clock::now(), false);
  m.OnWorkerOpened({10}, absl::UnavailableError("connection refused"), Clock::now());
  take = false;
  m.OnWorkerOpened({11}, absl::UnavailableError("connection refused"), Clock::now());
  m.OnWorkerOpened({12}, absl::DeadlineExceededError("open timed out"), Clock::now());
  ASSERT_EQ(offered.size(), 2u) << "only UNAVAILABLE failures are offered";
  EXPECT_EQ(offered[0], a);
  EXPECT_EQ(offered[1], b);
  EXPECT_EQ(finished, 3);
  v1::GenerateResponse chunk;
  bool done = false;
  absl::Status st;
  EXPECT_FALSE(a->Pop(absl::ZeroDuration(), &chunk, &done, &st));
  EXPECT_FALSE(done) << "a rerouted request gets no final status from this lane";
  EXPECT_FALSE(b->Pop(absl::ZeroDuration(), &chunk, &done, &st));
  ASSERT_TRUE(done);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("worker w0"), std::string::npos) << st;
  StepMachine::Released rel = m.Reap(Clock::now());
  EXPECT_EQ(rel.worker, (std::vector<uint64_t>{10, 11, 12})) << "outcomes unknown: ids are ours";
  EXPECT_EQ(m.size(), 0);
}

TEST_F(StepMachineTest, CancelledWhileOpeningIsKeptUntilTheOpenReturns) {
  auto r = Req({1}, 5);
  machine_->Admit({r}, Clock::now(), true);
  r->Cancel();
  StepMachine::Released rel = machine_->Reap(Clock::now());
  EXPECT_TRUE(rel.worker.empty() && rel.drafter.empty());
  EXPECT_EQ(machine_->size(), 1) << "its Opens are in flight";
  std::vector<int32_t> ids;
  EXPECT_EQ(Popped(r.get(), &ids).code(), absl::StatusCode::kCancelled) << "the client knows now";
  machine_->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 2}}, Clock::now());
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  rel = machine_->Reap(Clock::now());
  EXPECT_EQ(rel.worker, std::vector<uint64_t>{10});
  EXPECT_EQ(rel.drafter, std::vector<uint64_t>{10});
  EXPECT_TRUE(ids.empty()) << "no token after the cancel";
}

// A greedy "auto" sequence decoding plainly (no cost prior yet, so the
// planner drafts nothing) falls behind on its drafter; once it has decoded
// plainly for catch_up_after_steps steps and is catch_up_tokens behind it
// gets one catch-up item with the backlog, is not drafted or caught up again
// while that is in flight, and the drafter's step and consumed count advance
// when it returns. A failed catch-up re-opens the drafter.
TEST_F(StepMachineTest, PlainStretchesCatchTheDrafterUpOffTheStep) {
  const StepMachineOptions defaults;
  const int n = defaults.catch_up_tokens;
  ASSERT_GE(n, defaults.catch_up_after_steps) << "the test assumes tokens trigger last";
  auto r = AutoReq(0.0f);
  machine_->Admit({r}, Clock::now(), true);
  machine_->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 100}},
                           Clock::now());
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  int32_t next = 101;
  auto plain_step = [&] {
    EXPECT_TRUE(machine_->PlanDrafts().empty());
    machine_->ApplyDrafts(std::vector<DraftReply>{});
    std::vector<VerifyItem> v = machine_->PlanVerify();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_FALSE(v[0].drafted);
    machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {next++}, 0}});
  };
  // The drafter has seen the prompt; token 100 on is backlog: 1 + k tokens
  // after k plain steps.
  for (int k = 1; k < n - 1; ++k) {
    plain_step();
    EXPECT_TRUE(machine_->PlanCatchUps().empty()) << "only " << k + 1 << " behind";
  }
  plain_step();
  std::vector<DraftItem> c = machine_->PlanCatchUps();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].catch_up);
  EXPECT_EQ(c[0].step, 1u);
  // All of the backlog but its last token, which stays for the next Draft
  // as its root: the catch-up may return before another token is committed,
  // and a Draft with no new token is refused (this was a flaky drafter error).
  ASSERT_EQ(c[0].new_tokens.size(), static_cast<size_t>(n - 1));
  EXPECT_EQ(c[0].new_tokens.front(), 100);
  EXPECT_EQ(c[0].new_tokens.back(), 100 + n - 2);
  EXPECT_EQ(c[0].feature_begin, 1) << "the row before token 100 is the prompt's last";
  for (int i = 0; i < n; ++i) {
    plain_step();
    EXPECT_TRUE(machine_->PlanCatchUps().empty()) << "one catch-up in flight at a time";
  }
  machine_->OnCaughtUp({10}, std::vector<absl::Status>{absl::OkStatus()});
  // n tokens came meanwhile: the next catch-up starts where the first
  // stopped, step 2.
  c = machine_->PlanCatchUps();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].step, 2u);
  EXPECT_EQ(c[0].new_tokens.front(), 100 + n - 1);
  EXPECT_EQ(c[0].new_tokens.back(), 100 + 2 * n - 2);
  EXPECT_TRUE(machine_->PlanDrafterOpens(Clock::now()).empty()) << "never re-opened mid catch-up";
  machine_->OnCaughtUp({10}, absl::UnavailableError("drafter down"));
  std::vector<DrafterOpenItem> reopen = machine_->PlanDrafterOpens(Clock::now());
  ASSERT_EQ(reopen.size(), 1u) << "its drafter state is unknown after a failed catch-up";
  EXPECT_TRUE(reopen[0].release_first);
}

TEST_F(StepMachineTest, SampledSequencesNeverCatchUpBesideTheSteps) {
  auto r = AutoReq(1.0f);
  machine_->Admit({r}, Clock::now(), true);
  machine_->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 100}},
                           Clock::now());
  machine_->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  for (int i = 0; i < 2 * StepMachineOptions{}.catch_up_tokens; ++i) {
    machine_->PlanDrafts();
    machine_->ApplyDrafts(std::vector<DraftReply>{});
    ASSERT_EQ(machine_->PlanVerify().size(), 1u);
    machine_->ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {101 + i}, 0}});
    EXPECT_TRUE(machine_->PlanCatchUps().empty());
  }
}

// Start-up profiles: a verify step costs 1 ms + 10 us a token, a Draft
// call `draft_call` seconds. Sequence ids 10, 11, ...
StepMachineOptions ProfiledOptions(double draft_call) {
  VerifyCostModel::Coefficients v;
  v.per_step = 1e-3;
  v.per_token = 1e-5;
  StepMachineOptions o;
  o.next_sequence_id = [next = uint64_t{10}]() mutable { return next++; };
  o.verify_profile = *VerifyCostModel::FromCoefficients(v);
  o.draft_profile = *DraftCostModel::FromCoefficients({draft_call, 0.0, 0.0, 0.0});
  return o;
}

// Admits a greedy "auto" request (AutoRequest) as sequence 10 and opens it on
// the worker (first token 100) and on the drafter.
std::shared_ptr<RequestState> OpenFirstAuto(StepMachine* m, int max_tokens) {
  auto r = AutoRequest(0, max_tokens);
  m->Admit({r}, Clock::now(), true);
  m->OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 100}}, Clock::now());
  m->OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  return r;
}

// While the planner finds that no tree pays, an "auto" sequence gets no
// catch-ups: feeding the drafter a backlog nobody drafts from only takes the
// hardware the Verify runs on (0.64x plain at concurrency 64 on an H200).
// Profiles where a Draft call costs a second make every tree lose; after the
// planner's probe steps (drafted, answered with rejected chains) the lane
// decodes plainly and the drafter falls ever further behind, uncaught.
TEST(StepMachineCatchUpTest, NoCatchUpsWhileNoTreePays) {
  StepMachine m(ProfiledOptions(1.0));
  auto r = OpenFirstAuto(&m, 200);
  int32_t next = 101, drafted = 0;
  for (int i = 0; i < 6 * StepMachineOptions{}.catch_up_tokens; ++i) {
    std::vector<DraftItem> d = m.PlanDrafts();
    // A chain:2 from the root; the verify below rejects it.
    std::vector<DraftReply> replies(
        d.size(), DraftReply{absl::OkStatus(), absl::OkStatus(), 3, next - 1, {-1, 0, 1}, false, 1000});
    drafted += !d.empty();
    m.ApplyDrafts(replies);
    ASSERT_EQ(m.PlanVerify().size(), 1u);
    m.ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {next++}, 0}});
    m.OnStepTimes(d.empty() ? 0.0 : 1.0, 1e-3, 1.1e-3, d.empty() ? 1.1e-3 : 1.0011, 0.0);
    EXPECT_TRUE(m.PlanCatchUps().empty()) << "step " << i << ": a catch-up while plain pays";
  }
  EXPECT_TRUE(m.planner().prefers_plain());
  EXPECT_GE(drafted, 1) << "the probes drafted";
  EXPECT_LE(drafted, 8) << "probes, and a check or two at most";
}

TEST(StepMachineDeferTest, WhileNoTreePaysOnlyACheckOfSequencesOpensOnTheDrafter) {
  // Drafting costs a second a call: the planner settles on plain decoding.
  StepMachine m(ProfiledOptions(1.0));
  auto request = [](float temperature) { return AutoRequest(temperature, 200); };
  StepMachine::Admission first = m.Admit({request(0)}, Clock::now(), true);
  ASSERT_EQ(first.drafter.size(), 1u) << "before any plan the drafter is opened";
  m.OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 100}}, Clock::now());
  m.OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  int32_t next = 101;
  for (int i = 0; i < 20; ++i) {
    std::vector<DraftItem> d = m.PlanDrafts();
    const DraftReply chain{absl::OkStatus(), absl::OkStatus(), 3, next - 1, {-1, 0, 1}, false,
                           1000};
    m.ApplyDrafts(std::vector<DraftReply>(d.size(), chain));
    ASSERT_EQ(m.PlanVerify().size(), 1u);
    m.ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), {next++}, 0}});
    m.OnStepTimes(d.empty() ? 0.0 : 1.0, 1e-3, 1.1e-3, d.empty() ? 1.1e-3 : 1.0011, 0.0);
  }
  ASSERT_TRUE(m.planner().prefers_plain());
  const int most = m.planner().check_max_sequences();
  // Twelve greedy arrivals: drafter state for the check's worth only (one
  // sequence has it already); a sampled one (its own bandit) opens anyway.
  std::vector<std::shared_ptr<RequestState>> arrivals;
  for (int i = 0; i < 12; ++i) arrivals.push_back(AutoRequest(0, 2));  // a step each
  arrivals.push_back(request(0.8f));
  StepMachine::Admission a = m.Admit(arrivals, Clock::now(), true);
  EXPECT_EQ(static_cast<int>(a.drafter.size()), most - 1 + 1);
  EXPECT_EQ(a.drafter.back().id, 10u + 13) << "the sampled request is opened";
  ASSERT_EQ(a.worker.size(), 13u);
  std::vector<uint64_t> ids;
  for (const WorkerOpenItem& w : a.worker) ids.push_back(w.id);
  m.OnWorkerOpened(ids, std::vector<WorkerOpenReply>(13, {absl::OkStatus(), 100}), Clock::now());
  EXPECT_TRUE(m.PlanDrafterOpens(Clock::now()).empty())
      << "the deferred sequences stay without drafter state while plain pays";
  // The greedy ones step at once (plainly), the deferred ones and those
  // whose drafter Open is still in flight alike: all twelve are verified
  // beside the first; the sampled one waits for its Open (its trees must
  // not depend on timing).
  EXPECT_TRUE(m.PlanDrafts().empty());
  m.ApplyDrafts(std::vector<DraftReply>{});
  std::vector<VerifyItem> v = m.PlanVerify();
  ASSERT_EQ(v.size(), 13u);
  for (const VerifyItem& it : v) EXPECT_NE(it.id, 10u + 13) << "the sampled one stepped";
  // They decoded plainly by the planner's choice, not for want of a
  // drafter: their stats count the step as planned, not as a fallback.
  m.ApplyVerify(std::vector<VerifyReply>(13, VerifyReply{absl::OkStatus(), {7}, 0}));
  for (size_t i = 0; i < 12; ++i) {
    v1::GenerateResponse c, last;
    bool done = false;
    absl::Status st;
    while (arrivals[i]->Pop(absl::ZeroDuration(), &c, &done, &st)) last = c;
    ASSERT_TRUE(done) << "arrival " << i << " ran to its 2 tokens";
    EXPECT_EQ(last.speculation().steps(), 1) << "arrival " << i;
    EXPECT_EQ(last.speculation().planned_steps(), 1) << "arrival " << i;
    EXPECT_EQ(last.speculation().fallback_steps(), 0) << "arrival " << i;
  }
  // The Opens return after the sequences they were for ended; the sampled
  // one steps from now on.
  std::vector<uint64_t> opened;
  for (const DrafterOpenItem& d : a.drafter) opened.push_back(d.id);
  m.OnDrafterOpened(opened, std::vector<absl::Status>(opened.size(), absl::OkStatus()),
                    Clock::now());
  m.ApplyDrafts(std::vector<DraftReply>(m.PlanDrafts().size(),
                                        DraftReply{absl::OkStatus(), absl::OkStatus(), 1, 0,
                                                   {-1}, false, 1000}));
  EXPECT_EQ(m.PlanVerify().size(), 2u) << "the first request and the sampled one";
}

TEST(StepMachineProfileTest, StartUpProfilesBecomeThePlannersPriors) {
  VerifyCostModel::Coefficients v;
  v.per_step = 2e-3;
  v.per_token = 5e-5;
  v.per_sequence = 1e-4;
  DraftCostModel::Coefficients d{3e-4, 2e-4, 1e-4, 1e-6};
  StepMachineOptions o;
  o.next_sequence_id = [] { return uint64_t{1}; };
  o.verify_profile = *VerifyCostModel::FromCoefficients(v);
  o.draft_profile = *DraftCostModel::FromCoefficients(d);
  StepMachine m(o);
  EXPECT_TRUE(m.planner().Ready()) << "a profiled lane plans from its first step";
  EXPECT_DOUBLE_EQ(m.planner().verify().coefficients().per_step, 2e-3);
  EXPECT_DOUBLE_EQ(m.planner().verify().coefficients().per_token, 5e-5);
  EXPECT_DOUBLE_EQ(m.planner().verify().Predict({4, 20, 0}), 2e-3 + 4 * 1e-4 + 20 * 5e-5);
  EXPECT_DOUBLE_EQ(m.planner().draft().coefficients().per_call, 3e-4);
  EXPECT_DOUBLE_EQ(m.planner().draft().Predict({3, 6, 6}), 3e-4 + 3 * 2e-4 + 6 * 1e-4 + 6e-6);

  // Without profiles the planner waits for the first measured step.
  StepMachineOptions plain;
  plain.next_sequence_id = [] { return uint64_t{1}; };
  EXPECT_FALSE(StepMachine(plain).planner().Ready());
}

TEST(StepMachinePredraftTest, HitsAndTimeSavedReachTheFinalStats) {
  StepMachineOptions o;
  o.next_sequence_id = [] { return uint64_t{10}; };
  // Drafting costs 1 ms per call + 1 ms per sequence-level.
  o.draft_profile = *DraftCostModel::FromCoefficients({1e-3, 0.0, 1e-3, 0.0});
  StepMachine m(o);
  GenerationRequest g;
  g.prompt = {1};
  g.max_tokens = 6;
  g.drafter = "d";
  g.tree = *TreeShape::Parse("chain:2");
  auto r = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
  m.Admit({r}, Clock::now(), true);
  m.OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 2}}, Clock::now());
  m.OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  auto step = [&](int32_t root, bool hit, int64_t answer_ns, std::vector<int32_t> commit) {
    ASSERT_EQ(m.PlanDrafts().size(), 1u);
    DraftReply d{absl::OkStatus(), absl::OkStatus(), 3, root, {-1, 0, 1}, hit, answer_ns};
    m.ApplyDrafts(std::vector<DraftReply>{d});
    ASSERT_TRUE(m.PlanVerify()[0].drafted);
    m.ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), commit, 0}});
  };
  step(2, true, 500000, {3});   // hit: 3 ms alone − 0.5 ms = 2.5 ms saved
  step(3, false, 3000000, {4});  // miss
  step(4, true, 4000000, {5, 6, 7});  // hit answered slower than predicted: nothing saved
  v1::GenerateResponse c, last;
  bool done = false;
  absl::Status st;
  while (r->Pop(absl::ZeroDuration(), &c, &done, &st)) last = c;
  ASSERT_TRUE(done);
  const v1::SpeculationStats& s = last.speculation();
  EXPECT_EQ(s.steps(), 3) << s.ShortDebugString();
  EXPECT_EQ(s.predraft_hits(), 2) << s.ShortDebugString();
  EXPECT_NEAR(s.predraft_saved_ms(), 2.5, 1e-9) << s.ShortDebugString();
}

// Parents of a full tree of `shape` (root -1, level by level).
std::vector<int32_t> ShapeParents(const TreeShape& shape) {
  std::vector<int32_t> parents{-1};
  int32_t level_begin = 0, level_end = 1;
  for (int32_t fanout : shape.fanouts()) {
    for (int32_t p = level_begin; p < level_end; ++p) {
      for (int32_t c = 0; c < fanout; ++c) parents.push_back(p);
    }
    level_begin = level_end;
    level_end = static_cast<int32_t>(parents.size());
  }
  return parents;
}

// Drives one sampled "auto" request (default shapes, no profiles) for
// `steps` steps; `accept(depth)` is how many drafted tokens each verify
// accepts. Returns, per step, whether the drafter was asked for a tree, and
// checks that a plain step's tokens reach the drafter with its next Draft.
std::vector<bool> RunSampledAuto(int steps, const std::function<int32_t(int32_t)>& accept) {
  StepMachineOptions o;
  o.next_sequence_id = [] { return uint64_t{10}; };
  for (const char* t : {"chain:1", "chain:2", "chain:3", "chain:4", "chain:6", "2,1,1", "2,2,1,1",
                        "3,2,2,1,1", "3,3,2,1", "2,2,2,2", "4,2,1"}) {
    o.bandit_shapes.push_back(*TreeShape::Parse(t));
  }
  StepMachine m(o);
  GenerationRequest g;
  g.prompt = {1};
  g.max_tokens = 100000;
  g.drafter = "d";
  g.auto_tree = true;
  g.sampling.temperature = 1.0f;
  g.seed = 7;
  auto r = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
  m.Admit({r}, Clock::now(), true);
  m.OnWorkerOpened({10}, std::vector<WorkerOpenReply>{{absl::OkStatus(), 2}}, Clock::now());
  m.OnDrafterOpened({10}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
  std::vector<bool> drafted;
  std::vector<int32_t> unseen{2};  // committed tokens the drafter has not been sent
  int32_t next = 3;
  for (int step = 0; step < steps; ++step) {
    std::vector<DraftItem> d = m.PlanDrafts();
    std::vector<int32_t> commit;
    if (d.empty()) {
      m.ApplyDrafts(std::vector<DraftReply>{});
      commit = {next++};
    } else {
      EXPECT_EQ(d[0].new_tokens, unseen) << "step " << step;
      unseen.clear();
      const TreeShape shape = *TreeShape::Parse(d[0].shape);
      DraftReply reply{absl::OkStatus(), absl::OkStatus(), shape.NumNodes(), 0};
      reply.root = next - 1;
      reply.parents = ShapeParents(shape);
      m.ApplyDrafts(std::vector<DraftReply>{reply});
      const int32_t a = accept(shape.Depth());
      for (int32_t i = 0; i <= a; ++i) commit.push_back(next++);
    }
    std::vector<VerifyItem> v = m.PlanVerify();
    EXPECT_EQ(v.size(), 1u);
    if (v.empty()) break;
    EXPECT_EQ(v[0].drafted, !d.empty());
    drafted.push_back(!d.empty());
    const int32_t a = static_cast<int32_t>(commit.size()) - 1;
    m.ApplyVerify(std::vector<VerifyReply>{{absl::OkStatus(), commit, a}});
    unseen.insert(unseen.end(), commit.begin(), commit.end());
  }
  return drafted;
}

TEST(StepMachineSampledAutoTest, UselessDrafterConvergesToPlain) {
  std::vector<bool> drafted = RunSampledAuto(128, [](int32_t) { return 0; });
  ASSERT_EQ(drafted.size(), 128u);
  EXPECT_TRUE(drafted[0]) << "an optimistic start tries a tree";
  int first_plain = -1, speculative = 0;
  for (size_t i = 0; i < drafted.size(); ++i) {
    if (!drafted[i] && first_plain < 0) first_plain = static_cast<int>(i);
    speculative += drafted[i];
  }
  EXPECT_GE(first_plain, 1);
  EXPECT_LE(first_plain, 3);
  EXPECT_LE(speculative, 6) << "of 128 steps";
}

TEST(StepMachineSampledAutoTest, PerfectDrafterKeepsSpeculating) {
  std::vector<bool> drafted = RunSampledAuto(64, [](int32_t depth) { return depth; });
  ASSERT_EQ(drafted.size(), 64u);
  for (size_t i = 0; i < drafted.size(); ++i) EXPECT_TRUE(drafted[i]) << "step " << i;
}

// One step of `m` against a drafter whose trees are accepted whole (the
// first child of every accepted node); plain sequences commit one token.
// Tokens are numbered from *next. Returns the step's Draft items.
std::vector<DraftItem> PerfectStep(StepMachine* m, int32_t* next) {
  std::vector<DraftItem> d = m->PlanDrafts();
  std::vector<DraftReply> replies;
  std::map<uint64_t, TreeShape> shapes;
  for (const DraftItem& it : d) {
    const TreeShape shape = *TreeShape::Parse(it.shape);
    DraftReply reply{absl::OkStatus(), absl::OkStatus(), shape.NumNodes(), it.new_tokens.back()};
    reply.parents = ShapeParents(shape);
    replies.push_back(std::move(reply));
    shapes.emplace(it.id, shape);
  }
  m->ApplyDrafts(replies);
  std::vector<VerifyReply> verified;
  for (const VerifyItem& v : m->PlanVerify()) {
    VerifyReply r{absl::OkStatus(), {(*next)++}, 0};
    if (v.drafted) {
      r.accepted_nodes = {0};
      int32_t level_begin = 1;
      for (int64_t size : shapes.at(v.id).LevelSizes()) {
        r.accepted_nodes.push_back(level_begin);
        r.tokens.push_back((*next)++);
        level_begin += static_cast<int32_t>(size);
      }
      r.num_accepted = static_cast<int32_t>(r.tokens.size()) - 1;
    }
    verified.push_back(std::move(r));
  }
  m->ApplyVerify(verified);
  return d;
}

// Candidate shapes chain:2-4 and cheap drafting (0.5 ms a call): trees pay
// under the models, until speculative steps are timed as slow.
StepMachineOptions ChainOptions() {
  StepMachineOptions o = ProfiledOptions(5e-4);
  for (const char* t : {"chain:2", "chain:3", "chain:4"}) {
    o.bandit_shapes.push_back(*TreeShape::Parse(t));
  }
  return o;
}

// While plain is preferred no catch-ups feed the drafter, so a check step
// would feed everything committed since the last check in its Draft call,
// and such a step is not timed: a too-high added-time factor could never be
// corrected by the checks (on an H100 the Mamba demo drafter stuck at
// 0.87-0.91x plain at 16 clients where it otherwise ran at 1.4x). A few
// steps before a check that drafts, the sequence is caught up, so the check
// drafts with a short backlog and teaches the factor. Here a perfect drafter
// (every tree accepted whole) is timed as very slow (20 ms steps): plain is
// preferred, the first check confirms it, and the second, timed as the
// models predict, brings the factor down.
TEST(StepMachineCatchUpTest, ACheckWhilePlainIsFedFirstSoItIsTimed) {
  StepMachine m(ChainOptions());
  auto r = OpenFirstAuto(&m, 100000);
  const int probes = SpecPlannerOptions{}.probe_steps;
  const int lead = SpecPlannerOptions{}.check_lead;
  int32_t next = 101;
  int drafted = 0, catch_ups = 0, last_catch_up = -1;
  double km_before_second_check = 0.0;
  for (int step = 0; step < 200 && drafted < probes + 3; ++step) {
    std::vector<DraftItem> d = PerfectStep(&m, &next);
    if (!d.empty()) {
      ++drafted;
      if (drafted > probes + 1) {
        // A check: caught up a few steps before, so its Draft brings only
        // what came since.
        EXPECT_GE(last_catch_up, step - lead - 1) << "step " << step << ": check not fed";
        EXPECT_LE(d[0].new_tokens.size(), 1u + lead) << "step " << step;
      }
      if (drafted == probes + 3) km_before_second_check = m.planner().time_factor(true, 1);
    }
    // Speculative steps take 20 ms, except the second check (1.7 ms: what
    // the models predict); plain ones 1.1 ms.
    const double wall = d.empty() ? 1.1e-3 : drafted == probes + 3 ? 1.7e-3 : 20e-3;
    m.OnStepTimes(d.empty() ? 0.0 : 5e-4, 1e-3, 1.1e-3, wall, d.empty() ? 0.0 : 6e-4);
    std::vector<DraftItem> c = m.PlanCatchUps();
    if (!c.empty()) {
      ASSERT_EQ(c.size(), 1u);
      EXPECT_TRUE(c[0].catch_up);
      EXPECT_TRUE(m.planner().prefers_plain()) << "step " << step;
      ++catch_ups;
      last_catch_up = step;
      m.OnCaughtUp({10}, std::vector<absl::Status>{absl::OkStatus()});
    }
  }
  ASSERT_EQ(drafted, probes + 3) << "probes, one planned tree, two checks";
  EXPECT_EQ(catch_ups, 2) << "one before each check";
  EXPECT_NEAR(km_before_second_check, 8.0, 1e-9) << "the slow steps set the factor to its cap";
  EXPECT_LT(m.planner().time_factor(true, 1), 7.0) << "the second check was timed";
}

// Twelve sequences with drafter state, a check drafting for eight: over the
// steps before each check, catch-ups go to eight sequences at most, though
// the others fall as far behind (the catch-ups here return at once, so each
// step of the lead could feed more).
TEST(StepMachineCatchUpTest, ACheckFeedsOnlyAsManySequencesAsItDrafts) {
  StepMachine m(ChainOptions());
  std::vector<std::shared_ptr<RequestState>> reqs;
  std::vector<uint64_t> ids;
  std::vector<WorkerOpenReply> opened;
  for (int i = 0; i < 12; ++i) {
    reqs.push_back(AutoRequest(0, 100000));
    ids.push_back(10 + i);
    opened.push_back({absl::OkStatus(), 100});
  }
  m.Admit(reqs, Clock::now(), true);
  m.OnWorkerOpened(ids, opened, Clock::now());
  m.OnDrafterOpened(ids, std::vector<absl::Status>(ids.size(), absl::OkStatus()), Clock::now());
  const int probes = SpecPlannerOptions{}.probe_steps;
  const int most = m.planner().check_max_sequences();
  ASSERT_LT(most, 12);
  int32_t next = 101;
  int drafted = 0, window = 0;
  std::vector<int> fed;  // catch-ups sent before each check
  for (int step = 0; step < 400 && fed.size() < 3; ++step) {
    std::vector<DraftItem> d = PerfectStep(&m, &next);
    if (!d.empty() && ++drafted > probes + 1) {
      EXPECT_LE(static_cast<int>(d.size()), most) << "a check drafts for a few";
      fed.push_back(window);
    }
    if (!d.empty()) window = 0;
    m.OnStepTimes(d.empty() ? 0.0 : 5e-4, 1e-3, 1.1e-3, d.empty() ? 1.1e-3 : 20e-3,
                  d.empty() ? 0.0 : 6e-4);
    std::vector<DraftItem> c = m.PlanCatchUps();
    window += static_cast<int>(c.size());
    std::vector<uint64_t> caught;
    for (const DraftItem& it : c) caught.push_back(it.id);
    if (!c.empty()) {
      m.OnCaughtUp(caught, std::vector<absl::Status>(caught.size(), absl::OkStatus()));
    }
  }
  ASSERT_EQ(fed.size(), 3u) << "three checks while plain";
  for (size_t k = 0; k < fed.size(); ++k) EXPECT_LE(fed[k], most) << "check " << k;
  EXPECT_EQ(fed[1], most) << "the second check's lead fed a check's worth";
  EXPECT_EQ(fed[2], most);
}

TEST(ValidateDraftedTreeTest, NamesTheFirstDefect) {
  v1::TokenTree t;
  for (int tok : {5, 6, 7}) t.add_tokens(tok);
  for (int p : {-1, 0, 1}) t.add_parents(p);
  EXPECT_TRUE(ValidateDraftedTree(t, 10, 8).ok());
  EXPECT_EQ(ValidateDraftedTree(t, 10, 2).code(), absl::StatusCode::kInvalidArgument);
  v1::TokenTree bad = t;
  bad.set_tokens(2, 10);
  absl::Status st = ValidateDraftedTree(bad, 10, 8);
  EXPECT_NE(st.message().find("tokens[2]"), std::string::npos) << st;
  bad = t;
  bad.set_parents(2, 2);
  st = ValidateDraftedTree(bad, 10, 8);
  EXPECT_NE(st.message().find("parents[2]"), std::string::npos) << st;
  bad = t;
  bad.add_parents(0);
  EXPECT_FALSE(ValidateDraftedTree(bad, 10, 8).ok());
  EXPECT_FALSE(ValidateDraftedTree(v1::TokenTree(), 10, 8).ok());
  bad = t;
  v1::SparseDistribution* q = bad.add_draft();
  q->add_tokens(6);
  q->add_probs(0.5f);
  EXPECT_TRUE(ValidateDraftedTree(bad, 10, 8).ok());
  q->add_tokens(12);
  q->add_probs(0.5f);
  st = ValidateDraftedTree(bad, 10, 8);
  EXPECT_NE(st.message().find("draft[0].tokens[1]"), std::string::npos) << st;
  q->set_tokens(1, 7);
  q->set_probs(1, std::nanf(""));
  st = ValidateDraftedTree(bad, 10, 8);
  EXPECT_NE(st.message().find("draft[0].probs[1]"), std::string::npos) << st;
}

TEST(ReleaseQueueTest, RetriesWithBackoffThenGivesUp) {
  ReleaseQueueOptions o;
  o.max_attempts = 3;
  o.initial_backoff = std::chrono::milliseconds(100);
  ReleaseQueue q(o);
  const Clock::time_point t0 = Clock::now();
  q.Add({1, 2}, t0);
  EXPECT_EQ(q.TakeDue(t0), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(q.TakeDue(t0).empty()) << "one batch in flight at a time";
  q.OnResult(false, t0);
  EXPECT_TRUE(q.TakeDue(t0 + std::chrono::milliseconds(50)).empty()) << "backing off";
  EXPECT_EQ(q.TakeDue(t0 + std::chrono::milliseconds(100)).size(), 2u);
  q.OnResult(false, t0 + std::chrono::milliseconds(100));
  EXPECT_TRUE(q.TakeDue(t0 + std::chrono::milliseconds(250)).empty()) << "the back-off doubled";
  EXPECT_EQ(q.TakeDue(t0 + std::chrono::milliseconds(300)).size(), 2u);
  q.OnResult(false, t0 + std::chrono::milliseconds(300));
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(q.dropped(), 2);
  q.Add({3}, t0);
  EXPECT_EQ(q.TakeDue(t0), std::vector<uint64_t>{3});
  q.OnResult(true, t0);
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(q.dropped(), 2);
}

}  // namespace
}  // namespace treespec
