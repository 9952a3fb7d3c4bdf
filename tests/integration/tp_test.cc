// Tensor-parallel worker groups as real processes (build/bin/treespec-worker
// --tp-size 2 --tp-rank R --rendezvous HOST:PORT) on loopback:
//  - a TP = 2 group answers Open and Verify exactly like a TP = 1 worker,
//    greedy and seeded sampling (so its logits agree to far below a sampling
//    step; tests/unit/llama_tp_test.cc compares the logits themselves), also
//    though the group prefills in chunks of 3 tokens and the reference in one
//    pass;
//  - greedy speculative decoding through a TP = 2 group (coordinator +
//    mamba drafter, and the target as its own drafter, which accepts long
//    paths and so exercises KV compaction on every rank) equals plain greedy;
//    also for Mamba-2 and Mamba-2 + attention targets (activation replay);
//  - killing a rank: the group reports NOT_SERVING within a bounded time, its
//    in-flight request ends with UNAVAILABLE naming the rank, its RPCs fail
//    fast, and the coordinator sends new requests to a second healthy group;
//  - a hung rank (SIGSTOP) fails the group after the collective timeout;
//  - followers exit non-zero when rank 0 dies; a rank with no rendezvous to
//    reach, and a model that does not split, fail at start-up with clear
//    messages.
// Every child process is SIGKILLed and reaped by its owner's destructor and
// dies with the test (PR_SET_PDEATHSIG).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/integration/worker_group.h"
#include "tests/testing/test_util.h"
#include "treespec/v1/worker.grpc.pb.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A TP = 1 worker process (no rendezvous).
absl::StatusOr<std::unique_ptr<RankProcess>> StartSingle(std::string* address) {
  std::vector<std::string> args = WorkerArgs(2, 0, "x:1", 3, kTargetModel);
  // Drop the --tp-* / --rendezvous* / --collective* / --prefill-chunk-tokens
  // flags: the reference prefills each prompt in one pass.
  args.resize(args.size() - 12);
  auto p = RankProcess::Spawn(args);
  auto listening = p->WaitLine("listening on ", milliseconds(30000));
  if (!listening.ok()) return listening.status();
  *address = *listening;
  return p;
}

// ---------------------------------------------------------------- RPC helpers

std::unique_ptr<v1::Worker::Stub> WorkerStub(const std::string& address) {
  return v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// grpc.health.v1.Health/Check for service "": 1 SERVING, 2 NOT_SERVING, -1 on
// an RPC error.
int HealthStatus(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(2000));
  grpc::ByteBuffer request, response;  // HealthCheckRequest{} encodes to no bytes
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status st = done.get_future().get();
  if (!st.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1 (varint)}: 0x08 <status>.
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;
}

struct SeqSpec {
  uint64_t id;
  std::vector<int32_t> prompt;
  float temperature;
  uint64_t seed;
};

// Drives one worker endpoint through Open + `steps` Verify steps of the
// given sequences (trees: the pending token plus a fixed pattern of children
// that includes `hint` tokens, so some drafts are accepted), and returns a
// transcript of every result.
std::string Transcript(const std::string& address, const std::vector<SeqSpec>& seqs, int steps,
                       const std::vector<std::vector<int32_t>>& hints) {
  auto stub = WorkerStub(address);
  std::ostringstream out;
  v1::WorkerOpenRequest open;
  for (const SeqSpec& s : seqs) {
    v1::WorkerOpenSequence* o = open.add_sequences();
    o->set_sequence_id(s.id);
    o->mutable_prompt()->Assign(s.prompt.begin(), s.prompt.end());
    o->mutable_sampling()->set_temperature(s.temperature);
    o->mutable_sampling()->set_seed(s.seed);
    o->set_max_total_tokens(200);
  }
  v1::WorkerOpenResponse opened;
  grpc::ClientContext octx;
  grpc::Status st = stub->Open(&octx, open, &opened);
  if (!st.ok()) return absl::StrCat("Open failed: ", st.error_message());
  std::vector<int32_t> pending(seqs.size());
  std::vector<size_t> produced(seqs.size(), 0);
  for (int i = 0; i < opened.results_size(); ++i) {
    out << "open " << opened.results(i).sequence_id() << " code "
        << opened.results(i).status().code() << " first " << opened.results(i).first_token() << "\n";
    pending[i] = opened.results(i).first_token();
    produced[i] = 1;
  }
  for (int step = 1; step <= steps; ++step) {
    v1::VerifyRequest req;
    for (size_t i = 0; i < seqs.size(); ++i) {
      v1::SequenceStep* s = req.add_steps();
      s->set_sequence_id(seqs[i].id);
      s->set_step(step);
      v1::TokenTree* t = s->mutable_tree();
      // Root, then a chain of the hinted continuation (3 deep) and two
      // siblings of its first node.
      t->add_tokens(pending[i]);
      t->add_parents(-1);
      const std::vector<int32_t>& h = hints[i];
      for (int d = 0; d < 3; ++d) {
        const size_t at = produced[i] + d;
        t->add_tokens(at < h.size() ? h[at] : (step * 7 + d) % 128);
        t->add_parents(d);
      }
      t->add_tokens((step * 13 + 5) % 128);
      t->add_parents(0);
      t->add_tokens((step * 29 + 11) % 128);
      t->add_parents(0);
      if (seqs[i].temperature > 0) s->set_mode(v1::VERIFICATION_MODE_TARGET_SAMPLING);
    }
    v1::VerifyResponse resp;
    grpc::ClientContext vctx;
    st = stub->Verify(&vctx, req, &resp);
    if (!st.ok()) return absl::StrCat(out.str(), "Verify failed: ", st.error_message());
    for (int i = 0; i < resp.results_size(); ++i) {
      const v1::StepResult& r = resp.results(i);
      out << "step " << step << " seq " << r.sequence_id() << " code " << r.status().code()
          << " accepted " << r.num_accepted() << " tokens";
      for (int32_t tok : r.tokens()) out << " " << tok;
      out << "\n";
      if (r.tokens_size() > 0) pending[i] = r.tokens(r.tokens_size() - 1);
      produced[i] += r.tokens_size();
    }
  }
  return out.str();
}

// ---------------------------------------------------------------- tests

TEST(TpTest, OpenAndVerifyMatchSingleRank) {
  std::string single_address;
  auto single = StartSingle(&single_address);
  ASSERT_TRUE(single.ok()) << single.status();
  auto group = WorkerGroup::Start(2);
  ASSERT_TRUE(group.ok()) << group.status();

  std::vector<SeqSpec> seqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    // Half greedy, half seeded sampling at temperature 0.9.
    seqs.push_back({static_cast<uint64_t>(i + 1), TestPrompt(i, 5 + i), i % 2 ? 0.9f : 0.0f,
                    static_cast<uint64_t>(100 + i)});
    prompts.push_back(seqs.back().prompt);
  }
  // Greedy continuations (the first one is the first token): accepted drafts.
  std::vector<std::vector<int32_t>> hints = GreedyReference(prompts, 48);
  const std::string want = Transcript(single_address, seqs, 12, hints);
  const std::string got = Transcript((*group)->address, seqs, 12, hints);
  EXPECT_THAT(want, ::testing::Not(HasSubstr("failed")));
  EXPECT_EQ(got, want);
  // Drafts were accepted, so KV compaction was replayed on rank 1.
  EXPECT_THAT(got, HasSubstr("accepted 3"));
  EXPECT_EQ(HealthStatus((*group)->address), 1);
}

TEST(TpTest, GreedySpeculativeEqualsPlainGreedy) {
  auto group = WorkerGroup::Start(2);
  ASSERT_TRUE(group.ok()) << group.status();
  auto mamba = InProcessDrafter::Start(DrafterConfig{});
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  DrafterConfig self_config;
  self_config.kind = "transformer";
  self_config.model = kTargetModel;
  auto self = InProcessDrafter::Start(self_config);
  ASSERT_TRUE(self.ok()) << self.status();
  CoordinatorConfig cc;
  cc.workers = {(*group)->address};
  cc.drafters = {{"mamba", (*mamba)->address()}, {"self", (*self)->address()}};
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  constexpr int kTokens = 40;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(TestPrompt(i, 4 + i));
  const std::vector<std::vector<int32_t>> want = GreedyReference(prompts, kTokens);
  std::vector<v1::GenerateRequest> requests;
  std::vector<std::string> what;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(MakeRequest(prompts[i], kTokens, "mamba", "3,2,2,1,1"));
    what.push_back(absl::StrCat("mamba prompt ", i));
    requests.push_back(MakeRequest(prompts[i], kTokens, "self", "chain:4"));
    what.push_back(absl::StrCat("self prompt ", i));
    requests.push_back(MakeRequest(prompts[i], kTokens, "none"));
    what.push_back(absl::StrCat("plain prompt ", i));
  }
  // Concurrently, so steps batch several sequences on the group.
  std::vector<GenerateResult> results = RunConcurrently(stub.get(), requests);
  for (size_t k = 0; k < results.size(); ++k) {
    ASSERT_TRUE(results[k].status.ok()) << what[k] << ": " << results[k].status.error_message();
    EXPECT_EQ(results[k].ids, want[k / 3]) << what[k];
  }
  // The self-drafter's drafts are the target's own greedy tokens: accepted.
  GenerateResult self_alone = RunGenerate(stub.get(), MakeRequest(prompts[0], kTokens, "self", "chain:4"));
  ASSERT_TRUE(self_alone.has_final);
  EXPECT_GT(self_alone.final_chunk.speculation().accepted_tokens(), kTokens / 2);
}

// Mamba-2 (B / C groups split over the ranks) and the Mamba-2 + attention
// hybrid (one group, replicated; attention heads split) as TP = 2 targets: the
// ranks replay every tree pass, CommitPath (activation replay on each rank's
// heads) and KV compaction from the step log, and greedy speculative decoding
// with the target drafting for itself equals plain greedy.
TEST(TpTest, HybridTargetsGreedySpeculativeEqualsPlainGreedy) {
  for (const std::string target : {"tiny_mamba2", "tiny_bamba"}) {
    auto group = WorkerGroup::Start(2, 3, target);
    ASSERT_TRUE(group.ok()) << target << ": " << group.status();
    DrafterConfig self_config;
    self_config.kind = target == "tiny_mamba2" ? "mamba" : "transformer";
    self_config.model = target;
    auto self = InProcessDrafter::Start(self_config);
    ASSERT_TRUE(self.ok()) << self.status();
    CoordinatorConfig cc;
    cc.workers = {(*group)->address};
    cc.drafters = {{"self", (*self)->address()}};
    auto coordinator = InProcessCoordinator::Start(std::move(cc));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    auto stub = (*coordinator)->NewStub();
    constexpr int kTokens = 24;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) prompts.push_back(TestPrompt(i, 4 + 2 * i));
    const std::vector<std::vector<int32_t>> want = GreedyReference(prompts, kTokens, target);
    std::vector<v1::GenerateRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      requests.push_back(MakeRequest(prompts[i], kTokens, "self", "3,2,1"));
      requests.push_back(MakeRequest(prompts[i], kTokens, "none"));
    }
    std::vector<GenerateResult> results = RunConcurrently(stub.get(), requests);
    for (size_t k = 0; k < results.size(); ++k) {
      ASSERT_TRUE(results[k].status.ok()) << target << " request " << k << ": "
                                          << results[k].status.error_message();
      EXPECT_EQ(results[k].ids, want[k / 2]) << target << " request " << k;
    }
  }
}

// EAGLE, EAGLE-3 and ReDrafter heads read rank 0's hidden states (features after the
// all-reduces, whole on every rank) at Open, prefilled in chunks of 3, and at
// every Verify.
TEST(TpTest, GreedyEagleSpeculativeEqualsPlainGreedy) {
  const std::string demo = ::treespec::testing::SourceDir() + "/models/demo/";
  auto group = WorkerGroup::Start(2, 3, demo + "target");
  ASSERT_TRUE(group.ok()) << group.status();
  const std::vector<std::string> kinds = {"eagle", "eagle3", "redrafter"};
  std::vector<std::unique_ptr<InProcessDrafter>> drafters;
  CoordinatorConfig cc;
  cc.workers = {(*group)->address};
  for (const std::string& kind : kinds) {
    DrafterConfig config;
    config.kind = kind;
    config.model = demo + kind + "-head";
    config.target = demo + "target";
    auto d = InProcessDrafter::Start(config);
    ASSERT_TRUE(d.ok()) << kind << ": " << d.status();
    cc.drafters.push_back({kind, (*d)->address()});
    drafters.push_back(std::move(*d));
  }
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  constexpr int kTokens = 40;
  const size_t per_prompt = 1 + 2 * kinds.size();  // plain, then a tree and a chain per kind
  std::vector<v1::GenerateRequest> requests;
  std::vector<std::string> what;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt = {1};
    for (int32_t t : TestPrompt(i, 4 + i)) prompt.push_back(300 + t);
    requests.push_back(MakeRequest(prompt, kTokens, "none"));
    what.push_back(absl::StrCat("plain prompt ", i));
    for (const std::string& kind : kinds) {
      requests.push_back(MakeRequest(prompt, kTokens, kind, "3,2,2,1,1"));
      what.push_back(absl::StrCat(kind, " prompt ", i));
      requests.push_back(MakeRequest(prompt, kTokens, kind, "chain:4"));
      what.push_back(absl::StrCat(kind, " chain prompt ", i));
    }
  }
  std::vector<GenerateResult> results = RunConcurrently(stub.get(), requests);
  for (size_t k = 0; k < results.size(); ++k) {
    ASSERT_TRUE(results[k].status.ok()) << what[k] << ": " << results[k].status.error_message();
    EXPECT_EQ(results[k].ids, results[k - k % per_prompt].ids) << what[k];
    if (k % per_prompt == 0) continue;
    const v1::SpeculationStats& s = results[k].final_chunk.speculation();
    EXPECT_EQ(s.fallback_steps(), 0) << what[k] << " " << s.ShortDebugString();
    EXPECT_GT(s.accepted_tokens(), 0) << what[k] << " " << s.ShortDebugString();
  }
}

TEST(TpTest, KilledRankFailsItsGroupAndTrafficMovesToAHealthyGroup) {
  auto a = WorkerGroup::Start(2);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = WorkerGroup::Start(2);
  ASSERT_TRUE(b.ok()) << b.status();
  auto mamba = InProcessDrafter::Start(DrafterConfig{});
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  CoordinatorConfig cc;
  cc.workers = {(*a)->address, (*b)->address};
  cc.drafters = {{"mamba", (*mamba)->address()}};
  cc.verify_delay = milliseconds(20);
  auto coordinator = InProcessCoordinator::Start(std::move(cc));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto stub = (*coordinator)->NewStub();

  // A long stream on group A (both groups idle: the first is picked).
  std::atomic<int> chunks{0};
  GenerateOptions opts;
  opts.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
  auto in_flight = std::async(std::launch::async, [&] {
    return RunGenerate(stub.get(), MakeRequest(TestPrompt(1), 200, "mamba", "3,2,2,1,1"), opts);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() >= 3; }, milliseconds(30000)));
  ASSERT_EQ(WorkerSequences(WorkerStub((*a)->address).get()), 1) << "the stream is not on group A";

  const Clock::time_point killed = Clock::now();
  (*a)->ranks[1]->Signal(SIGKILL);
  GenerateResult r = in_flight.get();
  const double failed_after = Seconds(killed);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_THAT(r.status.error_message(), HasSubstr("rank 1 of 2"));
  EXPECT_LT(failed_after, 10.0);
  RecordProperty("in_flight_error", r.status.error_message());
  RecordProperty("in_flight_failed_after_ms", static_cast<int>(failed_after * 1000));
  EXPECT_TRUE(Eventually([&] { return HealthStatus((*a)->address) == 2; }, milliseconds(10000)))
      << "group A never reported NOT_SERVING";
  EXPECT_LT(Seconds(killed), 10.0);
  RecordProperty("not_serving_after_ms", static_cast<int>(Seconds(killed) * 1000));
  EXPECT_TRUE((*a)->ranks[0]->running()) << "rank 0 must stay up and answer";

  // Rank 0 fails its RPCs fast, naming the rank.
  {
    auto wa = WorkerStub((*a)->address);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
    v1::WorkerInfo info;
    grpc::Status st = wa->GetWorkerInfo(&ctx, v1::GetWorkerInfoRequest(), &info);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(st.error_message(), HasSubstr("rank 1 of 2"));
  }

  // New requests go to group B and give the plain greedy output.
  const std::vector<int32_t> prompt = TestPrompt(5);
  const std::vector<std::vector<int32_t>> want = GreedyReference({prompt}, 24);
  for (int i = 0; i < 3; ++i) {
    GenerateResult next = RunGenerate(stub.get(), MakeRequest(prompt, 24, "mamba", "3,2,2,1,1"));
    ASSERT_TRUE(next.status.ok()) << "request " << i << ": " << next.status.error_message();
    EXPECT_EQ(next.ids, want[0]) << "request " << i;
  }
  EXPECT_EQ(HealthStatus((*b)->address), 1);
}

TEST(TpTest, HungRankFailsTheGroupAfterTheCollectiveTimeout) {
  constexpr double kTimeoutS = 2;
  auto group = WorkerGroup::Start(2, kTimeoutS);
  ASSERT_TRUE(group.ok()) << group.status();
  auto stub = WorkerStub((*group)->address);
  (*group)->ranks[1]->Signal(SIGSTOP);
  const Clock::time_point stopped = Clock::now();
  v1::WorkerOpenRequest open;
  v1::WorkerOpenSequence* s = open.add_sequences();
  s->set_sequence_id(1);
  for (int32_t t : TestPrompt(2)) s->add_prompt(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(30000));
  v1::WorkerOpenResponse resp;
  grpc::Status st = stub->Open(&ctx, open, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("rank 1 of 2"));
  // Bounded: the collective timeout plus the wait for the rank's name.
  EXPECT_LT(Seconds(stopped), 3 * kTimeoutS + 3);
  RecordProperty("hung_error", st.error_message());
  RecordProperty("hung_failed_after_ms", static_cast<int>(Seconds(stopped) * 1000));
  EXPECT_EQ(HealthStatus((*group)->address), 2);
  (*group)->ranks[1]->Signal(SIGKILL);
}

TEST(TpTest, FollowerExitsNonZeroWhenRankZeroDies) {
  auto group = WorkerGroup::Start(2);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->ranks[1]->running());
  const Clock::time_point killed = Clock::now();
  (*group)->ranks[0]->Signal(SIGKILL);
  const int status = (*group)->ranks[1]->WaitExit(milliseconds(15000));
  ASSERT_NE(status, -1) << "rank 1 did not exit";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "wait status " << status;
  EXPECT_LT(Seconds(killed), 10.0);
  RecordProperty("follower_exit_after_ms", static_cast<int>(Seconds(killed) * 1000));
  RecordProperty("follower_stderr", (*group)->ranks[1]->Stderr());
}

TEST(TpTest, CleanShutdownStopsEveryRank) {
  auto group = WorkerGroup::Start(2);
  ASSERT_TRUE(group.ok()) << group.status();
  (*group)->ranks[0]->Signal(SIGTERM);
  const int s0 = (*group)->ranks[0]->WaitExit(milliseconds(15000));
  const int s1 = (*group)->ranks[1]->WaitExit(milliseconds(15000));
  EXPECT_TRUE(WIFEXITED(s0) && WEXITSTATUS(s0) == 0) << "rank 0 wait status " << s0;
  EXPECT_TRUE(WIFEXITED(s1) && WEXITSTATUS(s1) == 0) << "rank 1 wait status " << s1
                                                     << "; stderr: " << (*group)->ranks[1]->Stderr();
}

TEST(TpTest, UnreachableRendezvousIsAClearStartupError) {
  // A port nothing listens on: rank 1 retries, then gives up naming it.
  const std::string address = "127.0.0.1:9";  // discard port: refused on loopback
  std::vector<std::string> args = WorkerArgs(2, 1, address, 3, kTargetModel);
  args[args.size() - 5] = "1.5";  // --rendezvous-timeout-s
  auto rank1 = RankProcess::Spawn(args);
  const Clock::time_point t0 = Clock::now();
  const int status = rank1->WaitExit(milliseconds(20000));
  ASSERT_NE(status, -1) << "rank 1 did not give up";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  EXPECT_GE(Seconds(t0), 1.0);
  EXPECT_THAT(rank1->Stderr(), HasSubstr(address));
  EXPECT_THAT(rank1->Stderr(), HasSubstr("could not reach rank 0"));
  RecordProperty("stderr", rank1->Stderr());
}

TEST(TpTest, ModelThatDoesNotSplitIsAClearStartupError) {
  // 8 heads and 2 KV heads cannot be split 3 ways.
  auto group = WorkerGroup::Start(3);
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(group.status().message(), HasSubstr("is not divisible by tp size 3"));
  RecordProperty("error", std::string(group.status().message()));
}

}  // namespace
}  // namespace treespec::testing
