// ParallelChunks (kernels/cpu/thread_pool.h): every chunk runs exactly once,
// whatever the thread and chunk counts, including while another thread's job
// holds the pool (its chunks then run on the calling thread), and the calls
// return only when all their chunks are done. Also run under TSan
// (tools/sanitize.sh).
#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace treespec {
namespace {

// Runs `chunks` chunks on `threads` threads and checks each ran once.
void RunOnce(int threads, int chunks) {
  std::vector<std::atomic<int>> runs(chunks);
  cpu::ParallelChunks(threads, chunks, [&](int c) {
    ASSERT_GE(c, 0);
    ASSERT_LT(c, chunks);
    runs[c].fetch_add(1, std::memory_order_relaxed);
  });
  for (int c = 0; c < chunks; ++c) {
    ASSERT_EQ(runs[c].load(), 1) << "chunk " << c << " of " << chunks << ", " << threads
                                 << " threads";
  }
}

TEST(ParallelChunksTest, EveryChunkRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int chunks : {0, 1, 2, 3, 5, 8, 17, 64, 1000}) {
      for (int rep = 0; rep < 20; ++rep) RunOnce(threads, chunks);
    }
  }
}

TEST(ParallelChunksTest, BackToBackJobsOfChangingSizes) {
  // Decode issues a job every few microseconds with the workers still
  // spinning from the last one: a worker must never run a chunk of one job
  // with another's function or range.
  for (int i = 0; i < 5000; ++i) RunOnce(2 + i % 3, 1 + (i * 7) % 40);
}

TEST(ParallelChunksTest, UnevenChunksAreStolenAndAllFinishBeforeReturn) {
  // One slow chunk in the caller's range: the others are taken by whoever is
  // free, and the call returns only after the slow one.
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<int> done{0};
    cpu::ParallelChunks(2, 16, [&](int c) {
      if (c == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      done.fetch_add(1);
    });
    ASSERT_EQ(done.load(), 16);
  }
}

TEST(ParallelChunksTest, ConcurrentCallersEachGetAllTheirChunks) {
  // Two threads submit at once: one gets the pool, the other runs inline.
  std::vector<std::thread> callers;
  std::atomic<bool> failed{false};
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const int chunks = 1 + (i + t) % 23;
        std::vector<std::atomic<int>> runs(chunks);
        cpu::ParallelChunks(2, chunks, [&](int c) { runs[c].fetch_add(1); });
        for (int c = 0; c < chunks; ++c) {
          if (runs[c].load() != 1) failed.store(true);
        }
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_FALSE(failed.load());
}

}  // namespace
}  // namespace treespec
