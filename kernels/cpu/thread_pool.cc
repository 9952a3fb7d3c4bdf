#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace treespec::cpu {
namespace {

// state_ packs (generation << 32) | next chunk, so that a worker that wakes
// late can never claim a chunk of a newer job with an older job's function:
// its compare-and-swap fails once the generation has moved on.
class Pool {
 public:
  void Run(int helpers, int chunks, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) {
      for (int c = 0; c < chunks; ++c) fn(c);
      return;
    }
    Grow(helpers);
    fn_ = &fn;
    chunks_.store(chunks, std::memory_order_relaxed);
    helpers_.store(helpers, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    // seq_cst store and load here and on sleepers_ in Loop: either the
    // sleeper sees the new generation or we see the sleeper.
    state_.store(gen << 32);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
    int c;
    while (Claim(gen, &c)) {
      fn(c);
      done_.fetch_add(1, std::memory_order_release);
    }
    // Chunks claimed by a worker the OS has descheduled: yield the core to it.
    for (int spin = 0; done_.load(std::memory_order_acquire) < chunks; ++spin) {
      if (spin < 4000) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  bool Claim(uint64_t gen, int* chunk) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      if ((s >> 32) != gen) return false;
      const int next = static_cast<int>(s & 0xffffffffu);
      if (next >= chunks_.load(std::memory_order_relaxed)) return false;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        *chunk = next;
        return true;
      }
    }
  }

  void Grow(int helpers) {
    while (static_cast<int>(workers_.size()) < helpers) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { Loop(index); });
      workers_.back().detach();
    }
  }

  void Loop(int index) {
    uint64_t seen = state_.load(std::memory_order_acquire) >> 32;
    for (;;) {
      uint64_t gen = seen;
      for (int spin = 0; spin < 20000 && gen == seen; ++spin) {
        _mm_pause();
        gen = state_.load(std::memory_order_acquire) >> 32;
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> l(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(l, [&] { return (state_.load() >> 32) != seen; });
        sleepers_.fetch_sub(1);
        gen = state_.load(std::memory_order_acquire) >> 32;
      }
      seen = gen;
      if (index >= helpers_.load(std::memory_order_relaxed)) continue;
      int c;
      while (Claim(gen, &c)) {
        (*fn_)(c);  // valid: the job cannot finish while chunk c is not done
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  std::mutex run_mu_;  // one job at a time
  std::vector<std::thread> workers_;
  const std::function<void(int)>* fn_ = nullptr;
  std::atomic<uint64_t> state_{0};
  std::atomic<int> chunks_{0}, helpers_{0}, done_{0}, sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace

void ParallelChunks(int threads, int chunks, const std::function<void(int)>& fn) {
  if (threads <= 1 || chunks <= 1) {
    for (int c = 0; c < chunks; ++c) fn(c);
    return;
  }
  static Pool* pool = new Pool();  // never destroyed: workers are detached
  pool->Run(threads - 1, chunks, fn);
}

}  // namespace treespec::cpu
