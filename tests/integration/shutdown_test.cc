// Graceful shutdown of the coordinator binary: SIGTERM while a long stream is
// in flight → the health port reports NOT_SERVING, new requests are refused,
// the stream completes, the traces of the request are flushed, exit code 0.
// With no grace period the process still exits 0 at once and the cut stream
// ends with an error instead of hanging or ending OK.
#include <atomic>

#include "gtest/gtest.h"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kLongStream = 450;

class ShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDemoModels()) GTEST_SKIP() << "models/demo is missing";
  }
};

TEST_F(ShutdownTest, SigtermDrainsInFlightStreamsAndExitsZero) {
  OtlpReceiver receiver;
  auto d = Deployment::Start({"--health_port", "0", "--otlp_endpoint", receiver.endpoint()},
                             {"--shutdown_grace_s", "60"});
  ASSERT_TRUE(d.ok()) << d.status();
  ServiceProcess* coordinator = (*d)->coordinator.get();
  ASSERT_FALSE(coordinator->health().empty());
  EXPECT_EQ(HealthStatus(coordinator->health()), 1);
  EXPECT_EQ(HealthStatus(coordinator->health(), "liveness"), 1);
  auto stub = (*d)->Stub();

  std::atomic<int> received{0};
  std::atomic<bool> stream_done{false};
  StreamResult result;
  std::thread client([&] {
    result = Stream(stub.get(), TextRequest("Once upon a time", kLongStream, "none"), {},
                    [&](int tokens) { received.store(tokens); });
    stream_done.store(true);
  });
  ASSERT_TRUE(Eventually([&] { return received.load() >= 5; }, milliseconds(30000)));
  coordinator->Signal(SIGTERM);

  // NOT_SERVING while the stream is still running, yet alive (a liveness
  // probe must not restart a draining process).
  EXPECT_TRUE(Eventually([&] { return HealthStatus(coordinator->health()) == 2; }, milliseconds(5000)));
  EXPECT_EQ(HealthStatus(coordinator->health(), "liveness"), 1);
  // New requests are refused (UNAVAILABLE: retry elsewhere).
  grpc::StatusCode refused = grpc::StatusCode::OK;
  EXPECT_TRUE(Eventually(
      [&] {
        refused = Stream(stub.get(), TextRequest("Hello", 4, "none")).status.error_code();
        return refused == grpc::StatusCode::UNAVAILABLE;
      },
      milliseconds(5000)))
      << "last code " << refused;
  EXPECT_FALSE(stream_done.load()) << "the stream ended before the checks; make it longer";
  EXPECT_TRUE(coordinator->running());

  client.join();
  EXPECT_TRUE(result.status.ok()) << result.status.error_code() << " "
                                  << result.status.error_message();
  EXPECT_EQ(result.tokens, kLongStream);
  EXPECT_EQ(result.final_chunk.finish_reason(), v1::FINISH_REASON_LENGTH);
  const int status = coordinator->Wait(milliseconds(30000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;

  // The drained request's spans were exported before the exit.
  bool have_generate = false;
  for (const auto& s : receiver.spans()) {
    if (s.service != "treespec-coordinator" || s.span.name() != "generate") continue;
    for (const auto& kv : s.span.attributes()) {
      if (kv.key() == "treespec.completion_tokens" && kv.value().int_value() == kLongStream) {
        have_generate = true;
      }
    }
  }
  EXPECT_TRUE(have_generate) << "the drained stream's generate span was not flushed";

  for (ServiceProcess* p : {(*d)->drafter.get(), (*d)->worker.get()}) {
    p->Signal(SIGTERM);
    const int st = p->Wait(milliseconds(30000));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "wait status " << st;
  }
}

TEST_F(ShutdownTest, GracePeriodBoundsTheDrain) {
  auto d = Deployment::Start({"--health_port", "0"}, {"--shutdown_grace_s", "0"});
  ASSERT_TRUE(d.ok()) << d.status();
  ServiceProcess* coordinator = (*d)->coordinator.get();
  auto stub = (*d)->Stub();
  std::atomic<int> received{0};
  StreamResult result;
  std::thread client([&] {
    result = Stream(stub.get(), TextRequest("Once upon a time", 450, "none"), {},
                    [&](int tokens) { received.store(tokens); });
  });
  ASSERT_TRUE(Eventually([&] { return received.load() >= 5; }, milliseconds(30000)));
  const auto t0 = std::chrono::steady_clock::now();
  coordinator->Signal(SIGTERM);
  const int status = coordinator->Wait(milliseconds(20000));
  const auto took = std::chrono::steady_clock::now() - t0;
  client.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_LT(result.tokens, 450);
  EXPECT_FALSE(result.status.ok()) << "a cut stream must not end OK";
}

// Issue 10 defect d: a request still streaming, and one still waiting for
// admission, when the grace runs out each end with UNAVAILABLE "server
// shutting down", not a bare cancelled call.
TEST_F(ShutdownTest, RequestsLeftWhenTheGraceEndsGetUnavailable) {
  auto d = Deployment::Start({"--health_port", "0"},
                             {"--shutdown_grace_s", "1", "--max_batch", "1"});
  ASSERT_TRUE(d.ok()) << d.status();
  ServiceProcess* coordinator = (*d)->coordinator.get();
  auto stub = (*d)->Stub();
  std::atomic<int> received{0};
  StreamResult live, queued;
  std::thread first([&] {
    live = Stream(stub.get(), TextRequest("Once upon a time", 1500, "none"), {},
                  [&](int tokens) { received.store(tokens); });
  });
  ASSERT_TRUE(Eventually([&] { return received.load() >= 5; }, milliseconds(30000)));
  std::thread second([&] { queued = Stream(stub.get(), TextRequest("Once upon a time", 8, "none")); });
  std::this_thread::sleep_for(milliseconds(300));  // the second waits behind max_batch 1
  coordinator->Signal(SIGTERM);
  const int status = coordinator->Wait(milliseconds(20000));
  first.join();
  second.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  for (const StreamResult* r : {&live, &queued}) {
    EXPECT_EQ(r->status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << (r == &live ? "live: " : "queued: ") << r->status.error_message();
    EXPECT_NE(r->status.error_message().find("shutting down"), std::string::npos)
        << r->status.error_message();
  }
  EXPECT_LT(live.tokens, 1500);
  EXPECT_EQ(queued.tokens, 0);
}

}  // namespace
}  // namespace treespec::testing
