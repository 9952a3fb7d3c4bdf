// Draft-ahead in the proto-free step machine (coordinator/step_machine.h),
// driven by hand: what it asks beside each Verify, when a candidate replaces
// the Draft call (hit) and when it does not (miss, partial hits in a batch),
// the commits that tell the drafter, a failed ahead call, cancellation and
// ending while one is in flight, sequences that stop drafting (budget,
// planner plain, catch-ups), sampled requests, and the stats and metrics it
// reports.
#include <functional>

#include "coordinator/step_machine.h"
#include "coordinator/telemetry.h"
#include "gtest/gtest.h"
#include "obs/metrics.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

// A candidate tree: a chain of `depth` nodes rooted at `new_tokens`' last.
AheadCandidateInfo Candidate(std::vector<int32_t> new_tokens, int depth) {
  AheadCandidateInfo c;
  c.root = new_tokens.back();
  c.new_tokens = std::move(new_tokens);
  c.num_nodes = depth + 1;
  for (int i = 0; i <= depth; ++i) c.parents.push_back(i - 1);
  return c;
}

std::vector<int32_t> ChainParents(int depth) { return Candidate({0}, depth).parents; }

AheadReplies Replies(std::vector<absl::Status> commits, std::vector<AheadReply> ahead) {
  AheadReplies r;
  r.commits = std::move(commits);
  r.ahead = std::move(ahead);
  return r;
}

class StepMachineAheadTest : public ::testing::Test {
 protected:
  void Make(std::function<void(StepMachineOptions*)> tweak = nullptr) {
    next_id_ = 10;
    StepMachineOptions o;
    o.next_sequence_id = [this] { return next_id_++; };
    o.worker_name = "w0";
    o.draft_ahead = 2;
    if (tweak) tweak(&o);
    machine_ = std::make_unique<StepMachine>(o);
  }
  // Admits and opens a request (worker first token 100 + its index).
  std::shared_ptr<RequestState> Open(std::vector<int32_t> prompt, int max_tokens,
                                     const std::string& tree = "chain:2", float temperature = 0,
                                     uint64_t seed = 0) {
    GenerationRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.drafter = "d";
    if (tree == "auto") {
      g.auto_tree = true;
    } else {
      g.tree = *TreeShape::Parse(tree);
    }
    g.sampling.temperature = temperature;
    g.seed = seed;
    auto r = std::make_shared<RequestState>(g, Clock::now(), std::nullopt);
    const uint64_t id = next_id_;
    machine_->Admit({r}, Clock::now(), true);
    const int32_t first = 100 + static_cast<int32_t>(id - 10);
    machine_->OnWorkerOpened({id}, std::vector<WorkerOpenReply>{{absl::OkStatus(), first}},
                             Clock::now());
    machine_->OnDrafterOpened({id}, std::vector<absl::Status>{absl::OkStatus()}, Clock::now());
    return r;
  }
  // A Draft reply of a chain of `depth` rooted at `root`.
  static DraftReply Drafted(int32_t root, int depth) {
    DraftReply d;
    d.num_nodes = depth + 1;
    d.root = root;
    d.parents = ChainParents(depth);
    return d;
  }
  static VerifyReply Verified(std::vector<int32_t> tokens) {
    VerifyReply v;
    v.num_accepted = static_cast<int32_t>(tokens.size()) - 1;
    v.tokens = std::move(tokens);
    for (int32_t i = 0; i <= v.num_accepted; ++i) v.accepted_nodes.push_back(i);
    return v;
  }
  static v1::SpeculationStats Final(RequestState* r) {
    v1::GenerateResponse c, last;
    bool done = false;
    absl::Status st;
    while (r->Pop(absl::ZeroDuration(), &c, &done, &st)) last = c;
    EXPECT_TRUE(done);
    return last.speculation();
  }

  uint64_t next_id_ = 10;
  std::unique_ptr<StepMachine> machine_;
};

TEST_F(StepMachineAheadTest, AHitVerifiesTheCandidateWithoutADraftCall) {
  Make();
  auto r = Open({1, 2}, 7);
  // Step 1: no candidates yet; the Draft call drafts.
  std::vector<DraftItem> d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 2)});
  std::vector<VerifyItem> v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].candidate, -1);
  AheadPlan plan = machine_->PlanAhead();
  EXPECT_TRUE(plan.commits.empty());
  ASSERT_EQ(plan.ahead.size(), 1u);
  EXPECT_EQ(plan.ahead[0].id, 10u);
  EXPECT_EQ(plan.ahead[0].step, 2u) << "the drafter's next step";
  EXPECT_EQ(plan.ahead[0].shape, "chain:2") << "guessed: this step's shape";
  EXPECT_EQ(plan.ahead[0].max_candidates, 2);
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(),
                                     {Candidate({7}, 2), Candidate({101, 102, 103}, 2)}}}),
                       0.002);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102, 103})});
  // Step 2: the outcome was candidate 1: no Draft call.
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  machine_->ApplyDrafts(std::vector<DraftReply>{});
  v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].drafted);
  EXPECT_EQ(v[0].candidate, 1);
  EXPECT_EQ(v[0].root, 103);
  plan = machine_->PlanAhead();
  ASSERT_EQ(plan.commits.size(), 1u) << "the drafter learns the outcome";
  EXPECT_EQ(plan.commits[0].step, 2u);
  EXPECT_EQ(plan.commits[0].new_tokens, (std::vector<int32_t>{101, 102, 103}));
  EXPECT_EQ(plan.commits[0].shape, "chain:2");
  EXPECT_TRUE(plan.commits[0].omit_tree);
  ASSERT_EQ(plan.ahead.size(), 1u);
  EXPECT_EQ(plan.ahead[0].step, 3u);
  machine_->ApplyAhead(Replies({absl::OkStatus()}, {{absl::OkStatus(), {}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({104, 105, 106})});
  const v1::SpeculationStats s = Final(r.get());
  EXPECT_EQ(s.steps(), 2);
  EXPECT_EQ(s.draft_ahead_steps(), 1);
  EXPECT_EQ(s.draft_ahead_hits(), 1);
  EXPECT_EQ(s.predraft_hits(), 0) << "a draft-ahead hit is no pre-draft hit";
  EXPECT_EQ(s.accepted_tokens(), 4);
  EXPECT_NEAR(s.draft_ahead_wait_ms(), 2.0, 1e-9);
  EXPECT_EQ(s.drafter_errors(), 0);
}

TEST_F(StepMachineAheadTest, AMissDraftsNormallyAndPartialHitsShareTheStep) {
  Make();
  auto a = Open({1}, 8);
  auto b = Open({2}, 8);
  ASSERT_EQ(machine_->PlanDrafts().size(), 2u);
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 2), Drafted(101, 2)});
  machine_->PlanVerify();
  AheadPlan plan = machine_->PlanAhead();
  ASSERT_EQ(plan.ahead.size(), 2u);
  // a's outcome is a candidate, b's is not.
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({200, 201, 202}, 2)}},
                                    {absl::OkStatus(), {Candidate({300, 301, 302}, 2)}}}),
                       0.0);
  machine_->ApplyVerify(
      std::vector<VerifyReply>{Verified({200, 201, 202}), Verified({400, 401, 402})});
  std::vector<DraftItem> d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u) << "only the miss is drafted";
  EXPECT_EQ(d[0].id, 11u);
  EXPECT_EQ(d[0].new_tokens, (std::vector<int32_t>{400, 401, 402}));
  EXPECT_FALSE(d[0].omit_tree);
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(402, 2)});
  std::vector<VerifyItem> v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].candidate, 0);
  EXPECT_TRUE(v[1].drafted);
  EXPECT_EQ(v[1].candidate, -1);
  plan = machine_->PlanAhead();
  ASSERT_EQ(plan.commits.size(), 1u);
  EXPECT_EQ(plan.commits[0].id, 10u);
  ASSERT_EQ(plan.ahead.size(), 2u) << "both drafted: both asked again";
  EXPECT_EQ(plan.ahead[0].step, 3u);
  EXPECT_EQ(plan.ahead[1].step, 3u);
  machine_->ApplyAhead(Replies({absl::OkStatus()}, {{absl::OkStatus(), {}}, {absl::OkStatus(), {}}}),
                       0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({203}), Verified({403})});
  // Candidates asked but none given: both draft normally.
  d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].new_tokens, std::vector<int32_t>{203});
  EXPECT_EQ(d[1].new_tokens, std::vector<int32_t>{403});
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(203, 2), Drafted(403, 2)});
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(absl::DeadlineExceededError("slow drafter"), 0.0);
  machine_->ApplyVerify(
      std::vector<VerifyReply>{Verified({204, 205, 206}), Verified({404, 405, 406})});
  const v1::SpeculationStats sa = Final(a.get()), sb = Final(b.get());
  EXPECT_EQ(sa.steps(), 3);
  EXPECT_EQ(sa.draft_ahead_steps(), 2);
  EXPECT_EQ(sa.draft_ahead_hits(), 1);
  EXPECT_EQ(sb.draft_ahead_steps(), 2);
  EXPECT_EQ(sb.draft_ahead_hits(), 0);
  EXPECT_EQ(sa.drafter_errors() + sb.drafter_errors(), 0)
      << "a failed call without commits loses only candidates";
}

TEST_F(StepMachineAheadTest, AFailedAheadCallReopensTheCommittedSequences) {
  Make();
  auto r = Open({1}, 7);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 1)});
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({101, 102}, 1)}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102})});
  EXPECT_TRUE(machine_->PlanDrafts().empty()) << "hit";
  machine_->PlanVerify();
  AheadPlan plan = machine_->PlanAhead();
  ASSERT_EQ(plan.commits.size(), 1u);
  // The drafter dies with the commit in flight: whether it committed is
  // unknown, so its state is stale; the verified tree still counts.
  machine_->ApplyAhead(absl::UnavailableError("drafter down"), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({103, 104})});
  EXPECT_TRUE(machine_->PlanDrafts().empty()) << "no drafter state: plain";
  std::vector<VerifyItem> v = machine_->PlanVerify();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].drafted);
  EXPECT_TRUE(machine_->PlanAhead().empty());
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({105})});
  std::vector<DrafterOpenItem> reopen = machine_->PlanDrafterOpens(Clock::now());
  ASSERT_EQ(reopen.size(), 1u);
  EXPECT_TRUE(reopen[0].release_first);
  EXPECT_EQ(reopen[0].prompt, (std::vector<int32_t>{1, 100, 101, 102, 103, 104}));
  EXPECT_TRUE(machine_->PlanDrafts().empty()) << "re-opening";
  EXPECT_FALSE(machine_->PlanVerify()[0].drafted);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({106})});
  const v1::SpeculationStats s = Final(r.get());
  EXPECT_EQ(s.steps(), 4);
  EXPECT_EQ(s.drafter_errors(), 1) << "the failed commit";
  EXPECT_EQ(s.draft_ahead_hits(), 1);
  EXPECT_EQ(s.fallback_steps(), 2) << "the steps without drafter state";
}

TEST_F(StepMachineAheadTest, AnItemTheDrafterRefusesIsAMissAndAFailedCommitReopens) {
  Make();
  auto r = Open({1}, 30);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 1)});
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(Replies({}, {{absl::AbortedError("ahead step 2 was already drafted"),
                                     {Candidate({101, 102}, 1)}}}),
                       0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102})});
  ASSERT_EQ(machine_->PlanDrafts().size(), 1u) << "a refused item gives no candidates";
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(102, 1)});
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({103, 104}, 1)}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({103, 104})});
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  machine_->PlanVerify();
  ASSERT_EQ(machine_->PlanAhead().commits.size(), 1u);
  machine_->ApplyAhead(Replies({absl::AbortedError("draft step 3 was already drafted")},
                               {{absl::OkStatus(), {Candidate({105, 106}, 1)}}}),
                       0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({105, 106})});
  EXPECT_TRUE(machine_->PlanDrafts().empty()) << "stale: the candidates of a failed commit are not used";
  EXPECT_FALSE(machine_->PlanVerify()[0].drafted);
  ASSERT_EQ(machine_->PlanDrafterOpens(Clock::now()).size(), 1u);
  r->Cancel();
  machine_->Reap(Clock::now());
}

TEST_F(StepMachineAheadTest, CancelAndEndWhileTheAheadCallIsInFlight) {
  Make();
  auto a = Open({1}, 30);
  auto b = Open({2}, 30);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 1), Drafted(101, 1)});
  machine_->PlanVerify();
  ASSERT_EQ(machine_->PlanAhead().ahead.size(), 2u);
  // While the Verify and the ahead call are out, a's client cancels and the
  // worker refuses b's tree.
  a->Cancel();
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({102, 103}, 1)}},
                                    {absl::OkStatus(), {Candidate({104, 105}, 1)}}}),
                       0.0);
  VerifyReply failed;
  failed.status = absl::InvalidArgumentError("tree: wrong root");
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({102, 103}), failed});
  StepMachine::Released rel = machine_->Reap(Clock::now());
  EXPECT_EQ(rel.worker, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(rel.drafter, (std::vector<uint64_t>{10, 11})) << "their forks go with them";
  EXPECT_EQ(machine_->num_live(), 0);
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  EXPECT_TRUE(machine_->PlanVerify().empty());
  EXPECT_TRUE(machine_->PlanAhead().empty());
  EXPECT_EQ(Final(b.get()).steps(), 0);
}

TEST_F(StepMachineAheadTest, StoppingToDraftDropsTheCandidates) {
  Make();
  // 5 tokens: the first, then chain:2 steps of 3 tokens at most.
  auto r = Open({1}, 5);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 2)});
  machine_->PlanVerify();
  ASSERT_EQ(machine_->PlanAhead().ahead.size(), 1u);
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({101}, 2)}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101})});
  // 3 tokens left: the shape is still chain:2, the candidate matches.
  EXPECT_TRUE(machine_->PlanDrafts().empty());
  machine_->PlanVerify();
  AheadPlan plan = machine_->PlanAhead();
  EXPECT_EQ(plan.commits.size(), 1u);
  ASSERT_EQ(plan.ahead.size(), 1u);
  machine_->ApplyAhead(Replies({absl::OkStatus()}, {{absl::OkStatus(), {Candidate({102}, 2)}}}),
                       0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({102})});
  // 2 tokens left: the draft is cut to chain:1, which no candidate was
  // drafted for: a miss.
  std::vector<DraftItem> d = machine_->PlanDrafts();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].shape, "chain:1");
  EXPECT_EQ(d[0].new_tokens, std::vector<int32_t>{102});
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(102, 1)});
  machine_->PlanVerify();
  EXPECT_TRUE(machine_->PlanAhead().ahead.empty()) << "the last step asks for nothing";
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({103, 104})});
  const v1::SpeculationStats s = Final(r.get());
  EXPECT_EQ(s.draft_ahead_steps(), 2);
  EXPECT_EQ(s.draft_ahead_hits(), 1);
}

// "auto" with a draft cost no tree pays for: the probe steps draft (and ask
// ahead), then the planner decodes plainly; the candidates of the last probe
// are not used, and the drafter gets every token with the next Draft.
TEST_F(StepMachineAheadTest, ThePlannerGoingPlainDropsTheCandidates) {
  Make([](StepMachineOptions* o) {
    o->bandit_shapes = {*TreeShape::Parse("chain:3")};
    o->verify_profile = *VerifyCostModel::FromCoefficients({1e-3, 0, 1e-4, 0, 0, 0});
    o->draft_profile = *DraftCostModel::FromCoefficients({10.0, 0, 0, 0});
    o->planner.explore = 0;
  });
  auto r = Open({1}, 200, "auto");
  int32_t next = 101;
  std::vector<int32_t> unseen{100};
  int asked = 0, plain = 0;
  for (int step = 0; step < 8; ++step) {
    std::vector<DraftItem> d = machine_->PlanDrafts();
    if (!d.empty()) {
      EXPECT_EQ(d[0].new_tokens, unseen) << "step " << step;
      machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(unseen.back(), 3)});
    }
    std::vector<VerifyItem> v = machine_->PlanVerify();
    ASSERT_EQ(v.size(), 1u);
    AheadPlan plan = machine_->PlanAhead();
    if (!v[0].drafted) {
      plain += 1;
      EXPECT_TRUE(plan.empty()) << "no tree verified, nothing to ask";
    }
    // Candidates that never match (a bonus nobody predicts).
    if (!plan.ahead.empty()) {
      asked += 1;
      machine_->ApplyAhead(Replies(std::vector<absl::Status>(plan.commits.size()),
                                   {{absl::OkStatus(), {Candidate({7}, 3)}}}),
                           0.0);
    }
    machine_->ApplyVerify(std::vector<VerifyReply>{Verified({next})});
    if (!d.empty()) unseen.clear();  // the drafter consumed them
    unseen.push_back(next++);
  }
  EXPECT_EQ(asked, 4) << "the probe steps";
  EXPECT_EQ(plain, 4);
  r->Cancel();
  machine_->Reap(Clock::now());
}

TEST_F(StepMachineAheadTest, SampledRequestsAreAskedOnlyWhenAllowedAndCarryTheirSeed) {
  for (bool allowed : {false, true}) {
    Make([&](StepMachineOptions* o) { o->draft_ahead_sampled = allowed; });
    auto r = Open({1}, 30, "2,1", 0.8f, 1234);
    machine_->PlanDrafts();
    DraftReply tree;
    tree.num_nodes = 4;
    tree.root = 100;
    tree.parents = {-1, 0, 0, 1};
    machine_->ApplyDrafts(std::vector<DraftReply>{tree});
    machine_->PlanVerify();
    AheadPlan plan = machine_->PlanAhead();
    if (!allowed) {
      EXPECT_TRUE(plan.empty());
    } else {
      ASSERT_EQ(plan.ahead.size(), 1u);
      EXPECT_EQ(plan.ahead[0].shape, "2,1");
      EXPECT_FLOAT_EQ(plan.ahead[0].temperature, 0.8f);
      EXPECT_EQ(plan.ahead[0].seed, 1234u);
      machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({101, 102}, 2)}}}), 0.0);
    }
    r->Cancel();
    machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102})});
    machine_->Reap(Clock::now());
  }
}

TEST_F(StepMachineAheadTest, LargeStepsAskForNothingAndZeroTurnsItOff) {
  Make([](StepMachineOptions* o) { o->draft_ahead_max_batch = 1; });
  auto a = Open({1}, 30);
  auto b = Open({2}, 30);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 1), Drafted(101, 1)});
  machine_->PlanVerify();
  EXPECT_TRUE(machine_->PlanAhead().empty()) << "2 drafted sequences > max_batch 1";
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({102}), Verified({103})});
  machine_->set_draft_ahead(0, 0);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(102, 1), Drafted(103, 1)});
  machine_->PlanVerify();
  EXPECT_TRUE(machine_->PlanAhead().empty()) << "off";
  a->Cancel();
  b->Cancel();
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({104}), Verified({105})});
  machine_->Reap(Clock::now());
}

// The same counts in Prometheus, per drafter: steps asked (hit / miss), the
// time each hit saved, and each asking step's wait.
TEST_F(StepMachineAheadTest, HitsMissesSavedAndWaitReachPrometheus) {
  MetricsRegistry registry;
  CoordinatorTelemetry telemetry(&registry, nullptr);
  Make([&](StepMachineOptions* o) {
    o->telemetry = &telemetry;
    o->draft_profile = *DraftCostModel::FromCoefficients({1e-3, 0, 1e-3, 0});
  });
  auto r = Open({1}, 30);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 2)});
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {Candidate({101, 102, 103}, 2)}}}), 0.004);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102, 103})});
  EXPECT_TRUE(machine_->PlanDrafts().empty());  // hit
  machine_->PlanVerify();
  machine_->PlanAhead();
  machine_->ApplyAhead(Replies({absl::OkStatus()}, {{absl::OkStatus(), {}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({104})});
  ASSERT_EQ(machine_->PlanDrafts().size(), 1u);  // miss: nothing was offered
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(104, 2)});
  machine_->PlanVerify();
  const std::string text = registry.Render();
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("treespec_spec_draft_ahead_steps_total{drafter=\"d\",outcome=\"hit\"} 1")) << text;
  EXPECT_TRUE(has("treespec_spec_draft_ahead_steps_total{drafter=\"d\",outcome=\"miss\"} 1"));
  // The hit made the step's only Draft call unnecessary: 1 ms per call + 1 ms
  // per sequence-level of a depth-2 chain (no round trip measured yet).
  EXPECT_TRUE(has("treespec_spec_draft_ahead_saved_seconds_sum{drafter=\"d\"} 0.003")) << text;
  EXPECT_TRUE(has("treespec_spec_draft_ahead_wait_seconds_count{drafter=\"d\"} 2"));
  EXPECT_TRUE(has("treespec_spec_draft_ahead_wait_seconds_sum{drafter=\"d\"} 0.004"));
  r->Cancel();
  machine_->Reap(Clock::now());
}

// Catch-ups (PlanCatchUps) go only to sequences that decoded plainly for a
// while: never to one that drafted (and asked ahead) this step.
TEST_F(StepMachineAheadTest, DraftingSequencesDoNotCatchUp) {
  Make([](StepMachineOptions* o) {
    o->catch_up_tokens = 1;
    o->catch_up_after_steps = 1;
  });
  auto r = Open({1}, 30);
  machine_->PlanDrafts();
  machine_->ApplyDrafts(std::vector<DraftReply>{Drafted(100, 1)});
  machine_->PlanVerify();
  ASSERT_EQ(machine_->PlanAhead().ahead.size(), 1u);
  machine_->ApplyAhead(Replies({}, {{absl::OkStatus(), {}}}), 0.0);
  machine_->ApplyVerify(std::vector<VerifyReply>{Verified({101, 102})});
  EXPECT_TRUE(machine_->PlanCatchUps().empty());
  r->Cancel();
  machine_->Reap(Clock::now());
}

}  // namespace
}  // namespace treespec
