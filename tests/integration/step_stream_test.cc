// Step streams (rpc/step_stream.h) between the coordinator's real gRPC
// clients and real servers on loopback: each request answered as the unary
// call would answer it, errors, deadlines, servers without the stream method,
// shutdown with streams open, and telemetry per request.
#include "rpc/step_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "coordinator/clients.h"
#include "obs/trace_context.h"
#include "rpc/server.h"
#include "treespec/v1/drafter.grpc.pb.h"
#include "treespec/v1/worker.grpc.pb.h"

namespace treespec {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kFail = 666;  // a sequence id the fake fails the call for
constexpr uint64_t kSlow = 7;    // a sequence id the fake answers after 400 ms

// A worker whose Verify answers each step with its step number plus one as
// the only token, and counts how its requests came.
class EchoWorker : public v1::Worker::Service {
 public:
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest* req,
                      v1::VerifyResponse* resp) override {
    ++handled;
    for (const v1::SequenceStep& s : req->steps()) {
      if (s.sequence_id() == kFail) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "steps.sequence_id: 666 is cursed");
      }
      if (s.sequence_id() == kSlow) std::this_thread::sleep_for(milliseconds(400));
      v1::StepResult* r = resp->add_results();
      r->set_sequence_id(s.sequence_id());
      r->set_step(s.step());
      r->add_tokens(static_cast<int32_t>(s.step() + 1));
    }
    return grpc::Status::OK;
  }
  std::atomic<int> handled{0};
};

// The same with the stream method, served as WorkerService serves it.
class StreamingEchoWorker final : public EchoWorker, public StepStreamService {
 public:
  grpc::Status VerifyStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::VerifyResponse, v1::VerifyRequest>* stream) override {
    ++streams;
    return streams_.Serve(ctx, stream, kWorkerVerifyMethod,
                          [&](const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
                            ++on_stream;
                            return Verify(ctx, req, resp);
                          });
  }
  std::vector<std::string> StreamMethods() const override { return {kWorkerVerifyStreamMethod}; }

  std::atomic<int> streams{0}, on_stream{0};
};

v1::VerifyRequest Step(uint64_t id, uint64_t step) {
  v1::VerifyRequest req;
  v1::SequenceStep* s = req.add_steps();
  s->set_sequence_id(id);
  s->set_step(step);
  return req;
}

// The answer `Step(id, step)` must get.
void ExpectEcho(const absl::StatusOr<v1::VerifyResponse>& resp, uint64_t id, uint64_t step) {
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->results_size(), 1);
  EXPECT_EQ(resp->results(0).sequence_id(), id);
  EXPECT_EQ(resp->results(0).step(), step);
  ASSERT_EQ(resp->results(0).tokens_size(), 1);
  EXPECT_EQ(resp->results(0).tokens(0), static_cast<int32_t>(step + 1));
}

TEST(StepStreamTest, EveryVerifyGoesOnOneStreamAndIsAnsweredInOrder) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  for (uint64_t step = 0; step < 20; ++step) ExpectEcho(client->Verify(Step(3, step), milliseconds(5000)), 3, step);
  EXPECT_EQ(service.streams.load(), 1);
  EXPECT_EQ(service.on_stream.load(), 20);
  EXPECT_EQ(service.handled.load(), 20);
  // Callers at once each get a stream of their own, and their own answers.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t step = 0; step < 25; ++step) {
        absl::StatusOr<v1::VerifyResponse> r = client->Verify(Step(100 + t, step), milliseconds(5000));
        if (!r.ok() || r->results_size() != 1 || r->results(0).sequence_id() != 100u + t ||
            r->results(0).step() != step) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(service.streams.load(), 5);
  EXPECT_EQ(service.on_stream.load(), 120);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

TEST(StepStreamTest, AServerWithoutTheStreamMethodGetsUnaryCalls) {
  EchoWorker service;  // VerifyStream: the generated UNIMPLEMENTED
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  for (uint64_t step = 0; step < 5; ++step) ExpectEcho(client->Verify(Step(4, step), milliseconds(5000)), 4, step);
  EXPECT_EQ(service.handled.load(), 5);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

TEST(StepStreamTest, AFailedRequestGetsItsStatusAndTheNextOneANewStream) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  ExpectEcho(client->Verify(Step(1, 0), milliseconds(5000)), 1, 0);
  absl::StatusOr<v1::VerifyResponse> bad = client->Verify(Step(kFail, 1), milliseconds(5000));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_EQ(bad.status().message(), "steps.sequence_id: 666 is cursed");
  ExpectEcho(client->Verify(Step(1, 2), milliseconds(5000)), 1, 2);
  EXPECT_EQ(service.streams.load(), 2);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

TEST(StepStreamTest, ARequestPastItsDeadlineFailsAndTheNextOneIsAnswered) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  ExpectEcho(client->Verify(Step(1, 0), milliseconds(5000)), 1, 0);
  const auto t0 = Clock::now();
  absl::StatusOr<v1::VerifyResponse> late = client->Verify(Step(kSlow, 1), milliseconds(50));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_LT(Clock::now() - t0, milliseconds(350));  // the fake takes 400 ms
  ExpectEcho(client->Verify(Step(1, 2), milliseconds(5000)), 1, 2);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

TEST(StepStreamTest, ShutdownDoesNotWaitForIdleStreamsAndLaterRequestsAreUnavailable) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  ExpectEcho(client->Verify(Step(1, 0), milliseconds(5000)), 1, 0);  // a stream is open, idle
  const auto t0 = Clock::now();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(20));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  absl::StatusOr<v1::VerifyResponse> after = client->Verify(Step(1, 1), milliseconds(2000));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
}

TEST(StepStreamTest, ShutdownLetsABusyStreamAnswerItsRequest) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  ExpectEcho(client->Verify(Step(1, 0), milliseconds(5000)), 1, 0);
  absl::StatusOr<v1::VerifyResponse> slow;
  std::thread caller([&] { slow = client->Verify(Step(kSlow, 1), milliseconds(5000)); });
  while (service.on_stream.load() < 2) std::this_thread::sleep_for(milliseconds(1));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(20));
  caller.join();
  ExpectEcho(slow, kSlow, 1);
}

TEST(StepStreamTest, EachRequestIsRecordedAsTheUnaryMethodWithItsTraceContext) {
  StreamingEchoWorker service;
  absl::Mutex mu;
  std::vector<std::string> methods, parents;
  std::vector<grpc::StatusCode> codes;
  StreamCallRecorder recorder = [&](const StreamCall& call) {
    absl::MutexLock lock(&mu);
    methods.push_back(call.method);
    parents.push_back(call.trace == nullptr ? "" : call.trace->traceparent());
    codes.push_back(call.status.error_code());
    EXPECT_LE(call.start, call.end);
  };
  absl::StatusOr<RunningServer> server =
      StartServer("127.0.0.1:0", {&service}, {}, {}, std::move(recorder));
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(server->address, {});
  ExpectEcho(client->Verify(Step(1, 0), milliseconds(5000)), 1, 0);
  SpanContext parent;
  parent.trace_id = NewTraceId();
  parent.span_id = NewSpanId();
  parent.flags = 1;
  {
    OutgoingTraceScope scope(OutgoingTrace{parent, {}});
    ExpectEcho(client->Verify(Step(1, 1), milliseconds(5000)), 1, 1);
  }
  EXPECT_FALSE(client->Verify(Step(kFail, 2), milliseconds(5000)).ok());
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(methods.size(), 3u);
  for (const std::string& m : methods) EXPECT_EQ(m, "/treespec.v1.Worker/Verify");
  EXPECT_EQ(parents[0], "");
  EXPECT_EQ(parents[1], FormatTraceparent(parent));
  EXPECT_EQ(codes[1], grpc::StatusCode::OK);
  EXPECT_EQ(codes[2], grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(StepStreamTest, AStreamIdleForLongerThanTheLimitIsReplaced) {
  StreamingEchoWorker service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<v1::Worker::Stub> stub = v1::Worker::NewStub(MakeChannel(server->address, {}));
  StepStreamPool<v1::VerifyRequest, v1::VerifyResponse> pool(
      [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
        return stub->PrepareAsyncVerifyStream(c, cq);
      },
      milliseconds(100));
  auto call = [&](uint64_t step) {
    return pool.Call(Step(5, step), milliseconds(5000), [] {
      return absl::StatusOr<v1::VerifyResponse>(absl::InternalError("no unary call expected"));
    });
  };
  ExpectEcho(call(0), 5, 0);
  ExpectEcho(call(1), 5, 1);
  EXPECT_EQ(service.streams.load(), 1);
  std::this_thread::sleep_for(milliseconds(250));
  ExpectEcho(call(2), 5, 2);
  EXPECT_EQ(service.streams.load(), 2);
  ExpectEcho(call(3), 5, 3);
  EXPECT_EQ(service.streams.load(), 2);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

// A drafter whose Draft answers each sequence with its step as the tree's
// only token.
class EchoDrafter : public v1::Drafter::Service {
 public:
  grpc::Status Draft(grpc::ServerContext*, const v1::DraftRequest* req,
                     v1::DraftResponse* resp) override {
    ++handled;
    for (const v1::DraftSequence& s : req->sequences()) {
      if (s.sequence_id() == kSlow) std::this_thread::sleep_for(milliseconds(400));
      v1::DraftResult* r = resp->add_results();
      r->set_sequence_id(s.sequence_id());
      r->set_step(s.step());
      r->mutable_tree()->add_tokens(static_cast<int32_t>(s.step()));
    }
    return grpc::Status::OK;
  }
  std::atomic<int> handled{0};
};

// The same with the stream method.
class StreamingEchoDrafter final : public EchoDrafter, public StepStreamService {
 public:
  grpc::Status DraftStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::DraftResponse, v1::DraftRequest>* stream) override {
    ++streams;
    return streams_.Serve(ctx, stream, kDrafterDraftMethod,
                          [&](const v1::DraftRequest* req, v1::DraftResponse* resp) {
                            return Draft(ctx, req, resp);
                          });
  }
  std::vector<std::string> StreamMethods() const override { return {kDrafterDraftStreamMethod}; }

  std::atomic<int> streams{0};
};

v1::DraftRequest DraftOf(uint64_t id, uint64_t step) {
  v1::DraftRequest req;
  v1::DraftSequence* s = req.add_sequences();
  s->set_sequence_id(id);
  s->set_step(step);
  return req;
}

TEST(StepStreamTest, PendingDraftsUseStreamsAndAnUnwaitedOneIsCancelled) {
  StreamingEchoDrafter service;
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<DrafterClient> client = MakeGrpcDrafterClient(server->address, {});
  // Two drafts in flight at once: two streams.
  std::unique_ptr<PendingDraft> a = client->StartDraft(DraftOf(1, 5), milliseconds(5000));
  std::unique_ptr<PendingDraft> b = client->StartDraft(DraftOf(2, 6), milliseconds(5000));
  absl::StatusOr<v1::DraftResponse> rb = b->Wait();
  absl::StatusOr<v1::DraftResponse> ra = a->Wait();
  ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << " " << rb.status();
  EXPECT_EQ(ra->results(0).tree().tokens(0), 5);
  EXPECT_EQ(rb->results(0).tree().tokens(0), 6);
  EXPECT_EQ(service.streams.load(), 2);
  // Both streams went back to the pool: the next drafts reuse them.
  absl::StatusOr<v1::DraftResponse> rc = client->Draft(DraftOf(1, 7), milliseconds(5000));
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->results(0).tree().tokens(0), 7);
  EXPECT_EQ(service.streams.load(), 2);
  // Dropped before its answer: its stream is cancelled, not left with an
  // answer the next caller would read.
  client->StartDraft(DraftOf(kSlow, 8), milliseconds(5000)).reset();
  for (uint64_t step = 9; step < 12; ++step) {
    absl::StatusOr<v1::DraftResponse> r = client->Draft(DraftOf(1, step), milliseconds(5000));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->results(0).tree().tokens(0), static_cast<int32_t>(step));
  }
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

TEST(StepStreamTest, ADrafterWithoutTheStreamMethodGetsUnaryCalls) {
  EchoDrafter service;  // DraftStream: the generated UNIMPLEMENTED
  absl::StatusOr<RunningServer> server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<DrafterClient> client = MakeGrpcDrafterClient(server->address, {});
  absl::StatusOr<v1::DraftResponse> first =
      client->StartDraft(DraftOf(1, 3), milliseconds(5000))->Wait();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->results(0).tree().tokens(0), 3);
  absl::StatusOr<v1::DraftResponse> second = client->Draft(DraftOf(1, 4), milliseconds(5000));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->results(0).tree().tokens(0), 4);
  absl::StatusOr<v1::DraftResponse> third =
      client->StartDraft(DraftOf(1, 5), milliseconds(5000))->Wait();
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->results(0).tree().tokens(0), 5);
  EXPECT_EQ(service.handled.load(), 3);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
}

}  // namespace
}  // namespace treespec
