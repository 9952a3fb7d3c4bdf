#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace treespec::cpu {
namespace {

// Each participant (the caller is participant 0, worker i is i + 1) owns a
// contiguous range of the chunks and takes them from its front, in order; a
// participant whose range is empty steals from the back of the others'. So a
// thread walks one contiguous stretch of a matrix's columns, a single stream
// for the hardware prefetcher and for the kernels' own prefetch 16 KiB ahead
// (which, with chunks handed out round-robin from one counter, fetched the
// other thread's chunk and left each of its own chunks starting cold: 2
// threads decoded SmolLM2 Q4_1 at 1.07-1.12x one thread, 1.40x with ranges);
// and a worker the OS has not scheduled still holds nothing back, since the
// others steal its range.
//
// A range is one 64-bit word, (generation << 40) | (front << 20) | back, so
// that a worker that wakes late can never claim a chunk of a newer job with an
// older job's function: its compare-and-swap fails once the generation has
// moved on. Jobs of 2^20 chunks or more run on the calling thread.
class Pool {
 public:
  static constexpr int kMaxParticipants = 64;
  static constexpr uint64_t kMaxChunks = (uint64_t{1} << 20) - 1;

  void Run(int helpers, int chunks, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock() || static_cast<uint64_t>(chunks) > kMaxChunks) {
      for (int c = 0; c < chunks; ++c) fn(c);
      return;
    }
    helpers = std::min(helpers, kMaxParticipants - 1);
    Grow(helpers);
    const int participants = helpers + 1;
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    participants_.store(participants, std::memory_order_relaxed);
    const uint64_t gen = (job_.load(std::memory_order_relaxed) + 1) & kGenMask;
    for (int p = 0; p < participants; ++p) {
      const uint64_t front = static_cast<uint64_t>(chunks) * p / participants;
      const uint64_t back = static_cast<uint64_t>(chunks) * (p + 1) / participants;
      ranges_[p].word.store(Pack(gen, front, back), std::memory_order_relaxed);
    }
    // seq_cst store and load here and on sleepers_ in Loop: either the
    // sleeper sees the new job or we see the sleeper.
    job_.store(gen);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
    int c;
    while (Claim(gen, 0, participants, &c)) {
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
  static constexpr uint64_t kGenMask = (uint64_t{1} << 24) - 1;
  static uint64_t Pack(uint64_t gen, uint64_t front, uint64_t back) {
    return (gen << 40) | (front << 20) | back;
  }
  static uint64_t Gen(uint64_t w) { return w >> 40; }
  static uint64_t Front(uint64_t w) { return (w >> 20) & kMaxChunks; }
  static uint64_t Back(uint64_t w) { return w & kMaxChunks; }

  // Participant p's next chunk of job `gen`: the front of its own range, else
  // the back of another's (the next participants' first).
  bool Claim(uint64_t gen, int p, int participants, int* chunk) {
    std::atomic<uint64_t>& own = ranges_[p].word;
    uint64_t w = own.load(std::memory_order_acquire);
    while (Gen(w) == gen && Front(w) < Back(w)) {
      if (own.compare_exchange_weak(w, w + (uint64_t{1} << 20), std::memory_order_acq_rel)) {
        *chunk = static_cast<int>(Front(w));
        return true;
      }
    }
    for (int k = 1; k < participants; ++k) {
      std::atomic<uint64_t>& other = ranges_[(p + k) % participants].word;
      w = other.load(std::memory_order_acquire);
      while (Gen(w) == gen && Front(w) < Back(w)) {
        if (other.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel)) {
          *chunk = static_cast<int>(Back(w) - 1);
          return true;
        }
      }
    }
    return false;
  }

  void Grow(int helpers) {
    while (static_cast<int>(workers_.size()) < helpers) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { Loop(index); });
      workers_.back().detach();
    }
  }

  void Loop(int index) {
    uint64_t seen = job_.load(std::memory_order_acquire);
    for (;;) {
      uint64_t gen = seen;
      for (int spin = 0; spin < 20000 && gen == seen; ++spin) {
        _mm_pause();
        gen = job_.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> l(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(l, [&] { return job_.load() != seen; });
        sleepers_.fetch_sub(1);
        gen = job_.load(std::memory_order_acquire);
      }
      seen = gen;
      // Read after the job: the participants of this job or a newer one,
      // whose ranges carry another generation (a stale claim fails).
      const int participants = participants_.load(std::memory_order_relaxed);
      if (index + 1 >= participants) continue;
      int c;
      while (Claim(gen, index + 1, participants, &c)) {
        (*fn_)(c);  // valid: the job cannot finish while chunk c is not done
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  struct alignas(64) Range {
    std::atomic<uint64_t> word{0};
  };

  std::mutex run_mu_;  // one job at a time
  std::vector<std::thread> workers_;
  const std::function<void(int)>* fn_ = nullptr;
  Range ranges_[kMaxParticipants];
  std::atomic<uint64_t> job_{0};  // the generation of the latest job
  std::atomic<int> participants_{0}, done_{0}, sleepers_{0};
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
