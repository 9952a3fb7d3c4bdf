// Leases, with services as real processes (build/bin/treespec-*): a worker
// and a Mamba drafter started with --sequence-lease-s 2, a coordinator over
// them; a long speculative stream is running when the coordinator is
// SIGKILLed, so nobody ever releases its sequences. Within the lease (plus
// the sweeper's period and some slack) the worker's open sequences and used
// KV blocks, and the drafter's sequences, return to 0.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

constexpr char kLease[] = "2";

v1::WorkerInfo WorkerInfo(v1::Worker::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::WorkerInfo info;
  grpc::Status st = stub->GetWorkerInfo(&ctx, v1::GetWorkerInfoRequest(), &info);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return info;
}

TEST(LeaseTest, DeadCoordinatorsSequencesAreReleasedWithinTheLease) {
  auto worker = Subprocess::Start({BinaryPath("treespec-worker"), "--model",
                                   FixtureModel(kTargetModel), "--listen", "127.0.0.1:0",
                                   "--max-context", "256", "--kv-tokens", "16384",
                                   "--sequence-lease-s", kLease});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto drafter = Subprocess::Start({BinaryPath("treespec-drafter"), "--kind", "mamba", "--model",
                                    FixtureModel(kMambaModel), "--listen", "127.0.0.1:0",
                                    "--max-context", "512", "--sequence-lease-s", kLease});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  auto coordinator = Subprocess::Start(
      {BinaryPath("treespec-coordinator"), "--workers", (*worker)->address(), "--drafters",
       "mamba=" + (*drafter)->address(), "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto worker_stub = v1::Worker::NewStub(MakeChannel((*worker)->address(), {}));
  auto drafter_stub = v1::Drafter::NewStub(MakeChannel((*drafter)->address(), {}));
  auto gen_stub = v1::Generation::NewStub(MakeChannel((*coordinator)->address(), {}));
  const int64_t blocks_idle = WorkerInfo(worker_stub.get()).kv_blocks_used();

  // Kill the coordinator from the stream's reader after a few speculative
  // steps (so the drafter holds the sequence too): the stream (240 tokens)
  // is far from done.
  std::atomic<bool> killed{false};
  GenerateOptions options;
  options.on_chunk = [&](const GenerateResult& so_far) {
    if (so_far.num_chunks >= 4 && !killed.exchange(true)) {
      (*coordinator)->Stop(SIGKILL, milliseconds(5000));
    }
  };
  GenerateResult r = RunGenerate(gen_stub.get(), MakeRequest(TestPrompt(1), 240, "mamba", "3,2,1"),
                                 options);
  ASSERT_TRUE(killed.load()) << "no chunk arrived: " << r.status.error_message();
  EXPECT_FALSE(r.status.ok()) << "the stream cannot finish without its coordinator";
  const auto killed_at = std::chrono::steady_clock::now();

  // The orphaned sequences are still held right after the kill...
  v1::WorkerInfo held = WorkerInfo(worker_stub.get());
  EXPECT_EQ(held.num_sequences(), 1);
  EXPECT_GT(held.kv_blocks_used(), blocks_idle);
  EXPECT_EQ(DrafterSequences(drafter_stub.get()), 1);
  // ...and given back within the lease plus the sweep period and slack.
  EXPECT_TRUE(Eventually(
      [&] {
        v1::WorkerInfo info = WorkerInfo(worker_stub.get());
        return info.num_sequences() == 0 && info.kv_blocks_used() == blocks_idle;
      },
      milliseconds(6000)));
  EXPECT_TRUE(Eventually([&] { return DrafterSequences(drafter_stub.get()) == 0; },
                         milliseconds(6000)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  RecordProperty("released_after_s", std::to_string(seconds));
  EXPECT_GE(seconds, 1.0) << "released long before the 2 s lease ran out";

  for (Subprocess* p : {drafter->get(), worker->get()}) {
    const int status = p->Stop(SIGTERM, milliseconds(40000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  }
}

}  // namespace
}  // namespace treespec::testing
