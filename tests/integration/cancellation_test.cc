// Cancellation and deadlines free server state: a client that cancels
// mid-stream (ClientContext::TryCancel) or whose deadline passes leaves no
// sequence on the worker or the drafter after the next step, and a request
// running beside it in the same lane completes normally with exactly its
// expected output.
//
// The coordinator pauses 10 ms before every Verify so that long requests are
// still streaming when the test acts.
#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kFreeWithin{2000};

class CancellationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterConfig config;
    config.self = false;
    config.garbage = false;
    config.verify_delay = milliseconds(10);
    auto c = Cluster::Start(config);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    worker_ = cluster_->worker()->NewStub();
    drafter_ = cluster_->drafter("mamba")->NewStub();
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<v1::Worker::Stub> worker_;
  std::unique_ptr<v1::Drafter::Stub> drafter_;
};

TEST_F(CancellationTest, CancelMidStreamFreesWorkerAndDrafterState) {
  const std::vector<int32_t> other_prompt = TestPrompt(1);
  const int other_tokens = 150;
  const std::vector<int32_t> expected = GreedyReference({other_prompt}, other_tokens)[0];

  // A long request in the same (worker, mamba) lane that must be untouched.
  std::atomic<bool> other_done{false};
  GenerateResult other;
  std::jthread other_thread([&] {
    other = cluster_->Generate(MakeRequest(other_prompt, other_tokens, "mamba", "3,2,2,1,1"));
    other_done.store(true);
  });
  ASSERT_TRUE(Eventually([&] { return DrafterSequences(drafter_.get()) == 1; }, kFreeWithin));

  GenerateOptions cancel;
  cancel.cancel_after_chunks = 3;
  GenerateResult cancelled =
      cluster_->Generate(MakeRequest(TestPrompt(2), 200, "mamba", "3,2,2,1,1"), cancel);
  EXPECT_EQ(cancelled.status.error_code(), grpc::StatusCode::CANCELLED)
      << cancelled.status.error_message();
  EXPECT_GE(cancelled.num_chunks, 3);
  EXPECT_FALSE(cancelled.has_final);
  EXPECT_LT(cancelled.ids.size(), 200u);

  // Only the other request's sequence is left on both services. It is still
  // running when this holds, so the freed sequence is the cancelled one.
  bool other_was_running = false;
  EXPECT_TRUE(Eventually(
      [&] {
        other_was_running = !other_done.load();
        return WorkerSequences(worker_.get()) == 1 && DrafterSequences(drafter_.get()) == 1;
      },
      kFreeWithin))
      << "worker " << WorkerSequences(worker_.get()) << " drafter "
      << DrafterSequences(drafter_.get()) << " sequences";
  EXPECT_TRUE(other_was_running) << "the concurrent request ended too early for this test";

  other_thread.join();
  ASSERT_TRUE(other.status.ok()) << other.status.error_message();
  EXPECT_EQ(other.ids, expected);
  ASSERT_TRUE(other.has_final);
  EXPECT_EQ(other.final_chunk.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(other.final_chunk.speculation().fallback_steps(), 0);
  EXPECT_TRUE(Eventually(
      [&] { return WorkerSequences(worker_.get()) == 0 && DrafterSequences(drafter_.get()) == 0; },
      kFreeWithin));
}

TEST_F(CancellationTest, CancelledPlainRequestFreesWorkerState) {
  GenerateOptions cancel;
  cancel.cancel_after_chunks = 2;
  GenerateResult r = cluster_->Generate(MakeRequest(TestPrompt(3), 200, "none"), cancel);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED) << r.status.error_message();
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(worker_.get()) == 0; }, kFreeWithin))
      << WorkerSequences(worker_.get()) << " sequences left on the worker";
}

TEST_F(CancellationTest, DeadlineEndsStreamAndFreesState) {
  GenerateOptions options;
  options.deadline = milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult r =
      cluster_->Generate(MakeRequest(TestPrompt(4), 200, "mamba", "chain:4"), options);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  EXPECT_FALSE(r.has_final);
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_TRUE(Eventually(
      [&] { return WorkerSequences(worker_.get()) == 0 && DrafterSequences(drafter_.get()) == 0; },
      kFreeWithin))
      << "worker " << WorkerSequences(worker_.get()) << " drafter "
      << DrafterSequences(drafter_.get()) << " sequences";

  // The server still serves: a request with a generous deadline completes.
  options.deadline = milliseconds(30000);
  GenerateResult ok =
      cluster_->Generate(MakeRequest(TestPrompt(4), 8, "mamba", "chain:4"), options);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids, GreedyReference({TestPrompt(4)}, 8)[0]);
}

// Cancelling several streams of one lane at once, while others keep going.
TEST_F(CancellationTest, ManyCancellationsInOneLane) {
  std::vector<std::thread> threads;
  std::vector<GenerateResult> results(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      GenerateOptions o;
      if (i % 2 == 0) o.cancel_after_chunks = 2 + i;
      results[i] = cluster_->Generate(
          MakeRequest(TestPrompt(10 + i), i % 2 == 0 ? 200 : 24, "mamba", "2,2,2,2"), o);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 1; i < 6; i += 2) prompts.push_back(TestPrompt(10 + i));
  const auto expected = GreedyReference(prompts, 24);
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(results[i].status.error_code(), grpc::StatusCode::CANCELLED) << "request " << i;
    } else {
      ASSERT_TRUE(results[i].status.ok())
          << "request " << i << ": " << results[i].status.error_message();
      EXPECT_EQ(results[i].ids, expected[i / 2]) << "request " << i;
    }
  }
  EXPECT_TRUE(Eventually(
      [&] { return WorkerSequences(worker_.get()) == 0 && DrafterSequences(drafter_.get()) == 0; },
      kFreeWithin));
}

}  // namespace
}  // namespace treespec::testing
