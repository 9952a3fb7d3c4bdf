// Bad requests are rejected with the right code and a message naming the
// field, and harm nothing else:
//  - a table of malformed public requests, sent while a good request streams
//    in the same coordinator, which still completes with exactly its output;
//  - a full admission queue answers RESOURCE_EXHAUSTED;
//  - misuse of the internal Worker and Drafter services (repeated or
//    out-of-order steps, a tree not rooted at the last token, a KV cache too
//    small for a new sequence) fails only the offending sequence and never
//    commits a step twice.
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;

struct BadCase {
  std::string name;
  std::function<void(v1::GenerateRequest*)> mutate;
  grpc::StatusCode code;
  std::string field;  // the message names it
  std::string value;  // and, where it is short, the offending value
};

std::vector<BadCase> BadCases() {
  using C = grpc::StatusCode;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto tree = [](std::string t) {
    return [t](v1::GenerateRequest* r) {
      r->mutable_speculation()->set_drafter("mamba");
      r->mutable_speculation()->set_tree(t);
    };
  };
  return {
      {"empty_prompt", [](auto* r) { r->mutable_token_ids()->clear_ids(); }, C::INVALID_ARGUMENT,
       "token_ids.ids", ""},
      {"no_prompt", [](auto* r) { r->clear_prompt(); }, C::INVALID_ARGUMENT, "prompt", ""},
      {"token_out_of_range", [](auto* r) { r->mutable_token_ids()->set_ids(1, kVocab); },
       C::INVALID_ARGUMENT, "token_ids.ids[1]", "128"},
      {"token_negative", [](auto* r) { r->mutable_token_ids()->set_ids(0, -1); },
       C::INVALID_ARGUMENT, "token_ids.ids[0]", "-1"},
      {"temperature_negative", [](auto* r) { r->mutable_sampling()->set_temperature(-1); },
       C::INVALID_ARGUMENT, "sampling.temperature", "-1"},
      {"temperature_nan", [nan](auto* r) { r->mutable_sampling()->set_temperature(nan); },
       C::INVALID_ARGUMENT, "sampling.temperature", "nan"},
      {"temperature_huge", [](auto* r) { r->mutable_sampling()->set_temperature(1000); },
       C::INVALID_ARGUMENT, "sampling.temperature", "1000"},
      {"top_p_zero", [](auto* r) { r->mutable_sampling()->set_top_p(0); }, C::INVALID_ARGUMENT,
       "sampling.top_p", "0"},
      {"top_p_above_one", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       C::INVALID_ARGUMENT, "sampling.top_p", "1.5"},
      {"top_k_negative", [](auto* r) { r->mutable_sampling()->set_top_k(-1); }, C::INVALID_ARGUMENT,
       "sampling.top_k", "-1"},
      {"max_tokens_negative", [](auto* r) { r->set_max_tokens(-5); }, C::INVALID_ARGUMENT,
       "max_tokens", "-5"},
      {"max_tokens_beyond_context", [](auto* r) { r->set_max_tokens(1000); }, C::INVALID_ARGUMENT,
       "max_tokens", "1000"},
      {"prompt_beyond_context",
       [](auto* r) {
         for (int i = 0; i < 300; ++i) r->mutable_token_ids()->add_ids(5);
       },
       C::INVALID_ARGUMENT, "token_ids", ""},
      {"too_many_stop_strings",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->add_stop("s" + std::to_string(i));
       },
       C::INVALID_ARGUMENT, "stop", "17"},
      {"empty_stop_string", [](auto* r) { r->add_stop(""); }, C::INVALID_ARGUMENT, "stop[0]", ""},
      {"stop_string_too_long",
       [](auto* r) {
         r->add_stop("ok");
         r->add_stop(std::string(300, 'x'));
       },
       C::INVALID_ARGUMENT, "stop[1]", "300"},
      {"stop_token_out_of_range", [](auto* r) { r->add_stop_token_ids(kVocab); },
       C::INVALID_ARGUMENT, "stop_token_ids[0]", "128"},
      {"stop_token_negative",
       [](auto* r) {
         r->add_stop_token_ids(2);
         r->add_stop_token_ids(-3);
       },
       C::INVALID_ARGUMENT, "stop_token_ids[1]", "-3"},
      {"unknown_drafter", [](auto* r) { r->mutable_speculation()->set_drafter("eagle9"); },
       C::INVALID_ARGUMENT, "speculation.drafter", "eagle9"},
      {"tree_zero_level", tree("0,1"), C::INVALID_ARGUMENT, "speculation.tree", "0,1"},
      {"tree_not_a_shape", tree("abc"), C::INVALID_ARGUMENT, "speculation.tree", "abc"},
      {"tree_too_many_nodes", tree("8,8"), C::INVALID_ARGUMENT, "speculation.tree", "8,8"},
      {"tree_chain_zero", tree("chain:0"), C::INVALID_ARGUMENT, "speculation.tree", "chain:0"},
      {"tree_chain_too_long", tree("chain:40"), C::INVALID_ARGUMENT, "speculation.tree",
       "chain:40"},
      {"tree_negative", tree("3,-1"), C::INVALID_ARGUMENT, "speculation.tree", "3,-1"},
      {"greedy_with_temperature",
       [](auto* r) {
         r->mutable_sampling()->set_temperature(0.7f);
         r->mutable_speculation()->set_verification(v1::VERIFICATION_MODE_GREEDY);
       },
       C::INVALID_ARGUMENT, "speculation.verification", "0.7"},
      {"multiround_at_temperature_zero",
       [](auto* r) {
         r->mutable_speculation()->set_verification(v1::VERIFICATION_MODE_MULTIROUND);
       },
       C::INVALID_ARGUMENT, "speculation.verification", "multiround"},
      {"target_sampling_at_temperature_zero",
       [](auto* r) {
         r->mutable_speculation()->set_verification(v1::VERIFICATION_MODE_TARGET_SAMPLING);
       },
       C::INVALID_ARGUMENT, "speculation.verification", "target_sampling"},
      {"unknown_verification",
       [](auto* r) {
         r->mutable_speculation()->set_verification(static_cast<v1::VerificationMode>(99));
       },
       C::INVALID_ARGUMENT, "speculation.verification", "99"},
      {"text_without_tokenizer", [](auto* r) { r->set_text("Once upon a time"); },
       C::FAILED_PRECONDITION, "text", "tokenizer"},
  };
}

class BadRequestsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterConfig config;
    config.self = false;
    config.garbage = false;
    config.verify_delay = std::chrono::milliseconds(5);
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static Cluster* cluster_;
};

Cluster* BadRequestsTest::cluster_ = nullptr;

TEST_F(BadRequestsTest, TableOfBadRequestsWhileAGoodOneStreams) {
  const std::vector<BadCase> cases = BadCases();
  ASSERT_GE(cases.size(), 20u);
  const std::vector<int32_t> good_prompt = TestPrompt(0);
  const int good_tokens = 60;
  const std::vector<int32_t> expected = GreedyReference({good_prompt}, good_tokens)[0];

  std::atomic<int> good_chunks{0};
  GenerateResult good;
  std::jthread good_thread([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { good_chunks.fetch_add(1); };
    good = cluster_->Generate(MakeRequest(good_prompt, good_tokens, "mamba", "3,2,2,1,1"), o);
  });
  ASSERT_TRUE(Eventually([&] { return good_chunks.load() > 0; }, std::chrono::seconds(10)));

  for (const BadCase& c : cases) {
    v1::GenerateRequest req = MakeRequest({5, 6, 7}, 16, "none");
    c.mutate(&req);
    GenerateResult r = cluster_->Generate(req);
    EXPECT_EQ(r.status.error_code(), c.code) << c.name << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.field)) << c.name;
    if (!c.value.empty()) {
      EXPECT_THAT(r.status.error_message(), HasSubstr(c.value)) << c.name;
    }
    EXPECT_EQ(r.num_chunks, 0) << c.name;
  }
  good_thread.join();
  ASSERT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.ids, expected);
  ASSERT_TRUE(good.has_final);
  EXPECT_EQ(good.final_chunk.speculation().fallback_steps(), 0);
}

// Bad requests racing each other and good ones, all concurrent.
TEST_F(BadRequestsTest, ConcurrentBadAndGoodRequests) {
  const std::vector<BadCase> cases = BadCases();
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> good_prompts;
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::GenerateRequest req = MakeRequest({5, 6, 7}, 16, "none");
    cases[i].mutate(&req);
    reqs.push_back(req);
    if (i % 4 == 0) {
      good_prompts.push_back(TestPrompt(static_cast<int>(i)));
      reqs.push_back(MakeRequest(good_prompts.back(), 20, i % 8 == 0 ? "mamba" : "none", "4,2,1"));
    }
  }
  const auto expected = GreedyReference(good_prompts, 20);
  std::vector<GenerateResult> rs = RunConcurrently(cluster_->stub(), reqs);
  size_t bad = 0, good = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(rs[bad + good].status.error_code(), cases[i].code) << cases[i].name;
    ++bad;
    if (i % 4 == 0) {
      const GenerateResult& g = rs[bad + good];
      ASSERT_TRUE(g.status.ok()) << g.status.error_message();
      EXPECT_EQ(g.ids, expected[good]) << "good request " << good;
      ++good;
    }
  }
}

TEST(QueueTest, FullQueueIsResourceExhausted) {
  ClusterConfig config;
  config.mamba = config.self = config.garbage = false;
  config.coordinator.max_queue = 1;
  config.coordinator.max_batch = 1;
  config.verify_delay = std::chrono::milliseconds(20);
  auto cluster = Cluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(TestPrompt(20 + i));
    reqs.push_back(MakeRequest(prompts.back(), 10, "none"));
  }
  const auto expected = GreedyReference(prompts, 10);
  std::vector<GenerateResult> rs = RunConcurrently((*cluster)->stub(), reqs);
  int ok = 0, exhausted = 0;
  for (int i = 0; i < 8; ++i) {
    if (rs[i].status.ok()) {
      ++ok;
      EXPECT_EQ(rs[i].ids, expected[i]) << "request " << i;
    } else {
      ++exhausted;
      EXPECT_EQ(rs[i].status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << "request " << i << ": " << rs[i].status.error_message();
      EXPECT_THAT(rs[i].status.error_message(), HasSubstr("queue full"));
      EXPECT_EQ(rs[i].num_chunks, 0);
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  // Once the queue drains, requests are admitted again.
  GenerateResult later = (*cluster)->Generate(reqs[0]);
  ASSERT_TRUE(later.status.ok()) << later.status.error_message();
  EXPECT_EQ(later.ids, expected[0]);
}

// A request that cannot get KV capacity fails alone; the running one goes on.
TEST(CapacityTest, KvCacheTooSmallFailsOnlyTheNewRequest) {
  ClusterConfig config;
  config.mamba = config.self = config.garbage = false;
  // 20 blocks of 16 tokens; a sequence reserves its prompt + max_tokens plus
  // the largest tree (128 nodes): 56 + 128 tokens = 12 blocks fit once, not
  // twice.
  config.worker.kv_blocks = 20;
  config.verify_delay = std::chrono::milliseconds(5);
  auto cluster = Cluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = TestPrompt(30);
  const auto expected = GreedyReference({prompt}, 50)[0];

  std::atomic<int> chunks{0};
  GenerateResult first;
  std::jthread t([&] {
    GenerateOptions o;
    o.on_chunk = [&](const GenerateResult&) { chunks.fetch_add(1); };
    first = (*cluster)->Generate(MakeRequest(prompt, 50, "none"), o);
  });
  ASSERT_TRUE(Eventually([&] { return chunks.load() > 0; }, std::chrono::seconds(10)));
  GenerateResult second = (*cluster)->Generate(MakeRequest(TestPrompt(31), 50, "none"));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << second.status.error_message();
  t.join();
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.ids, expected);
  // With the first one gone, the second fits. The coordinator releases a
  // finished sequence's KV after its final chunk, so wait for the release.
  ASSERT_TRUE(Eventually(
      [&] { return WorkerSequences((*cluster)->worker()->NewStub().get()) == 0; },
      std::chrono::seconds(10)));
  GenerateResult again = (*cluster)->Generate(MakeRequest(TestPrompt(31), 50, "none"));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.ids, GreedyReference({TestPrompt(31)}, 50)[0]);
}

// A drafter out of sequence slots is not an error for anyone: the sequences
// it cannot take decode plainly (counted as fallback steps), the others are
// drafted, and every output is exactly the plain one.
TEST(CapacityTest, DrafterOutOfSlotsFallsBackToPlainDecoding) {
  ClusterConfig config;
  config.self = config.garbage = false;
  config.drafter_max_sequences = 2;
  config.verify_delay = std::chrono::milliseconds(2);
  auto cluster = Cluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(TestPrompt(70 + i));
    reqs.push_back(MakeRequest(prompts.back(), 30, "mamba", "3,2,2,1,1"));
  }
  const auto expected = GreedyReference(prompts, 30);
  std::vector<GenerateResult> rs = RunConcurrently((*cluster)->stub(), reqs);
  int with_fallback = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(rs[i].status.ok()) << "request " << i << ": " << rs[i].status.error_message();
    EXPECT_EQ(rs[i].ids, expected[i]) << "request " << i;
    ASSERT_TRUE(rs[i].has_final);
    with_fallback += rs[i].final_chunk.speculation().fallback_steps() > 0;
  }
  EXPECT_GE(with_fallback, 1) << "5 concurrent sequences on a drafter with 2 slots";
  EXPECT_TRUE(Eventually(
      [&] { return DrafterSequences((*cluster)->drafter("mamba")->NewStub().get()) == 0; },
      std::chrono::milliseconds(2000)));
}

// ---------------------------------------------------------------- internal services

v1::SequenceStep Step(uint64_t id, uint64_t step, std::vector<int32_t> tokens,
                      std::vector<int32_t> parents = {}) {
  v1::SequenceStep s;
  s.set_sequence_id(id);
  s.set_step(step);
  if (parents.empty()) {
    for (size_t i = 0; i < tokens.size(); ++i) parents.push_back(static_cast<int32_t>(i) - 1);
  }
  s.mutable_tree()->mutable_tokens()->Assign(tokens.begin(), tokens.end());
  s.mutable_tree()->mutable_parents()->Assign(parents.begin(), parents.end());
  return s;
}

class WorkerMisuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerConfig config;
    config.kv_blocks = 20;  // 320 tokens: one budget of 64 + 128 tree tokens, not two
    auto w = InProcessWorker::Start(config);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    stub_ = worker_->NewStub();
  }

  v1::WorkerOpenResponse Open(const std::vector<std::pair<uint64_t, std::vector<int32_t>>>& seqs,
                              int32_t max_total = 64) {
    v1::WorkerOpenRequest req;
    for (const auto& [id, prompt] : seqs) {
      v1::WorkerOpenSequence* s = req.add_sequences();
      s->set_sequence_id(id);
      s->mutable_prompt()->Assign(prompt.begin(), prompt.end());
      s->set_max_total_tokens(max_total);
    }
    grpc::ClientContext ctx;
    v1::WorkerOpenResponse resp;
    grpc::Status st = stub_->Open(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  v1::VerifyResponse Verify(const std::vector<v1::SequenceStep>& steps) {
    v1::VerifyRequest req;
    for (const auto& s : steps) *req.add_steps() = s;
    grpc::ClientContext ctx;
    v1::VerifyResponse resp;
    grpc::Status st = stub_->Verify(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.results_size(), req.steps_size());
    return resp;
  }

  std::unique_ptr<InProcessWorker> worker_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(WorkerMisuseTest, RepeatedAndOutOfOrderStepsAreAbortedAndCommitNothing) {
  const std::vector<int32_t> prompt = TestPrompt(40);
  const auto expected = GreedyReference({prompt}, 4)[0];
  v1::WorkerOpenResponse open = Open({{7, prompt}});
  ASSERT_EQ(open.results(0).status().code(), 0) << open.results(0).status().message();
  const int32_t first = open.results(0).first_token();
  EXPECT_EQ(first, expected[0]);

  v1::VerifyResponse r1 = Verify({Step(7, 1, {first})});
  ASSERT_EQ(r1.results(0).status().code(), 0) << r1.results(0).status().message();
  ASSERT_EQ(r1.results(0).tokens_size(), 1);
  const int32_t second = r1.results(0).tokens(0);
  EXPECT_EQ(second, expected[1]);

  // A retry of step 1, with its old root or with the current one: ABORTED.
  for (int32_t root : {first, second}) {
    v1::VerifyResponse again = Verify({Step(7, 1, {root})});
    EXPECT_EQ(again.results(0).status().code(), grpc::StatusCode::ABORTED);
    EXPECT_THAT(again.results(0).status().message(), HasSubstr("already committed"));
    EXPECT_EQ(again.results(0).tokens_size(), 0);
  }
  // A step from the future: ABORTED.
  v1::VerifyResponse future = Verify({Step(7, 5, {second})});
  EXPECT_EQ(future.results(0).status().code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(future.results(0).status().message(), HasSubstr("out of order"));

  // Nothing was committed twice: step 2 continues exactly where step 1 ended.
  v1::VerifyResponse r2 = Verify({Step(7, 2, {second})});
  ASSERT_EQ(r2.results(0).status().code(), 0) << r2.results(0).status().message();
  ASSERT_EQ(r2.results(0).tokens_size(), 1);
  EXPECT_EQ(r2.results(0).tokens(0), expected[2]);
  // A chain draft with the right next token is accepted.
  v1::VerifyResponse r3 = Verify({Step(7, 3, {expected[2], expected[3]})});
  ASSERT_EQ(r3.results(0).status().code(), 0);
  EXPECT_EQ(r3.results(0).num_accepted(), 1);
}

TEST_F(WorkerMisuseTest, BadStepsFailOnlyTheirSequence) {
  const auto expected = GreedyReference({TestPrompt(41), TestPrompt(42)}, 3);
  // Budgets of 8 tokens so both fit in the small cache.
  v1::WorkerOpenResponse open = Open({{1, TestPrompt(41)}, {2, TestPrompt(42)}}, 8);
  ASSERT_EQ(open.results(0).status().code(), 0) << open.results(0).status().message();
  ASSERT_EQ(open.results(1).status().code(), 0) << open.results(1).status().message();
  const int32_t root1 = open.results(0).first_token();
  const int32_t root2 = open.results(1).first_token();
  const int32_t wrong_root = (root2 + 1) % kVocab;

  v1::VerifyResponse r = Verify({
      Step(1, 1, {root1}),       // good
      Step(2, 1, {wrong_root}),  // tree not rooted at the last token
      Step(99, 1, {root1}),      // unknown sequence
      Step(1, 1, {root1}),       // the same sequence twice in one batch
  });
  EXPECT_EQ(r.results(0).status().code(), 0) << r.results(0).status().message();
  EXPECT_EQ(r.results(0).tokens(0), expected[0][1]);
  EXPECT_EQ(r.results(1).status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.results(1).status().message(), HasSubstr("tree.tokens[0]"));
  EXPECT_EQ(r.results(2).status().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(r.results(2).status().message(), HasSubstr("99"));
  EXPECT_EQ(r.results(3).status().code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Malformed trees and modes.
  v1::SequenceStep bad_parent = Step(2, 1, {root2, 5}, {-1, 3});
  v1::SequenceStep bad_token = Step(2, 1, {root2, kVocab});
  v1::SequenceStep bad_mode = Step(2, 1, {root2});
  bad_mode.set_mode(static_cast<v1::VerificationMode>(99));
  v1::SequenceStep sampling_at_t0 = Step(2, 1, {root2});
  sampling_at_t0.set_mode(v1::VERIFICATION_MODE_MULTIROUND);
  for (const v1::SequenceStep& s : {bad_parent, bad_token, bad_mode, sampling_at_t0}) {
    v1::VerifyResponse b = Verify({s});
    EXPECT_EQ(b.results(0).status().code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.results(0).status().message();
  }
  // Sequence 2 was left untouched by all of that.
  v1::VerifyResponse ok = Verify({Step(2, 1, {root2})});
  ASSERT_EQ(ok.results(0).status().code(), 0) << ok.results(0).status().message();
  EXPECT_EQ(ok.results(0).tokens(0), expected[1][1]);
}

TEST_F(WorkerMisuseTest, KvCacheTooSmallFailsOnlyTheNewSequence) {
  const auto expected = GreedyReference({TestPrompt(43)}, 3)[0];
  v1::WorkerOpenResponse open = Open({{1, TestPrompt(43)}, {2, TestPrompt(44)}});
  ASSERT_EQ(open.results(0).status().code(), 0) << open.results(0).status().message();
  EXPECT_EQ(open.results(1).status().code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << open.results(1).status().message();
  // Sequence 1 goes on; 2 does not exist.
  const int32_t root = open.results(0).first_token();
  v1::VerifyResponse r = Verify({Step(1, 1, {root}), Step(2, 1, {root})});
  ASSERT_EQ(r.results(0).status().code(), 0);
  EXPECT_EQ(r.results(0).tokens(0), expected[1]);
  EXPECT_EQ(r.results(1).status().code(), grpc::StatusCode::NOT_FOUND);
  // Again later, alone: still exhausted, still harmless.
  v1::WorkerOpenResponse again = Open({{3, TestPrompt(44)}});
  EXPECT_EQ(again.results(0).status().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::VerifyResponse r2 = Verify({Step(1, 2, {expected[1]})});
  ASSERT_EQ(r2.results(0).status().code(), 0);
  EXPECT_EQ(r2.results(0).tokens(0), expected[2]);
  // Releasing 1 makes room.
  {
    grpc::ClientContext ctx;
    v1::ReleaseRequest rel;
    rel.add_sequence_ids(1);
    rel.add_sequence_ids(12345);  // unknown ids are ignored
    v1::ReleaseResponse resp;
    ASSERT_TRUE(stub_->Release(&ctx, rel, &resp).ok());
    EXPECT_EQ(resp.num_released(), 1);
  }
  EXPECT_EQ(Open({{3, TestPrompt(44)}}).results(0).status().code(), 0);
}

TEST(DrafterMisuseTest, RepeatedAndOutOfOrderDraftStepsAreAborted) {
  auto d = InProcessDrafter::Start({"mamba", kMambaModel});
  ASSERT_TRUE(d.ok()) << d.status();
  auto stub = (*d)->NewStub();
  {
    v1::DrafterOpenRequest req;
    for (uint64_t id : {1, 2}) {
      auto* s = req.add_sequences();
      s->set_sequence_id(id);
      for (int32_t t : TestPrompt(static_cast<int>(id))) s->add_prompt(t);
    }
    grpc::ClientContext ctx;
    v1::DrafterOpenResponse resp;
    ASSERT_TRUE(stub->Open(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.results(0).status().code(), 0);
    ASSERT_EQ(resp.results(1).status().code(), 0);
  }
  auto draft =
      [&](std::vector<std::tuple<uint64_t, uint64_t, std::vector<int32_t>, std::string>> seqs) {
        v1::DraftRequest req;
        for (auto& [id, step, tokens, tree] : seqs) {
          auto* s = req.add_sequences();
          s->set_sequence_id(id);
          s->set_step(step);
          s->mutable_new_tokens()->Assign(tokens.begin(), tokens.end());
          s->set_tree(tree);
        }
        grpc::ClientContext ctx;
        v1::DraftResponse resp;
        EXPECT_TRUE(stub->Draft(&ctx, req, &resp).ok());
        return resp;
      };
  v1::DraftResponse s1 = draft({{1, 1, {9}, "3,2"}, {2, 1, {9}, "abc"}, {3, 1, {9}, "3,2"}});
  ASSERT_EQ(s1.results(0).status().code(), 0) << s1.results(0).status().message();
  EXPECT_EQ(s1.results(0).tree().tokens_size(), 1 + 3 + 6);
  EXPECT_EQ(s1.results(1).status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s1.results(1).status().message(), HasSubstr("tree"));
  EXPECT_EQ(s1.results(2).status().code(), grpc::StatusCode::NOT_FOUND);

  // Sequence 2's failed step did not count: its step 1 still works.
  v1::DraftResponse s2 = draft({{1, 1, {9, 4}, "3,2"}, {2, 1, {9}, "2"}, {1, 3, {4}, "2"}});
  EXPECT_EQ(s2.results(0).status().code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s2.results(0).status().message(), HasSubstr("already drafted"));
  EXPECT_EQ(s2.results(1).status().code(), 0) << s2.results(1).status().message();
  EXPECT_EQ(s2.results(2).status().code(), grpc::StatusCode::INVALID_ARGUMENT)
      << "the same sequence twice in one request";

  v1::DraftResponse s3 = draft({{1, 3, {4}, "2"}});
  EXPECT_EQ(s3.results(0).status().code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s3.results(0).status().message(), HasSubstr("out of order"));
  v1::DraftResponse s4 = draft({{1, 2, {4}, "2"}});
  EXPECT_EQ(s4.results(0).status().code(), 0) << s4.results(0).status().message();
}

}  // namespace
}  // namespace treespec::testing
