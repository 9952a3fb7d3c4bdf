// Worker groups as real processes for the integration tests: rank processes
// of build/bin/treespec-worker (--tp-size N --tp-rank R --rendezvous
// HOST:PORT) on loopback, or one TP = 1 worker process. tp_test drives their
// failure modes (signals, exits, stderr); the end-to-end equivalence tests
// (hybrid_equivalence_test) serve requests through them.
//
// RankProcess keeps the child's stdout on a pipe (read line by line for the
// "rendezvous on" / "listening on" lines) and its stderr in a temporary file;
// every child runs with OMP_NUM_THREADS=1 (the machine may have two cores for
// four ranks), dies with the test (PR_SET_PDEATHSIG) and is SIGKILLed and
// reaped by the destructor.
//
// Thread-safety: none; create, use and destroy on the test's main thread (the
// death signal follows the thread that forked).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {

class RankProcess {
 public:
  // Null if the pipe or fork failed.
  static std::unique_ptr<RankProcess> Spawn(const std::vector<std::string>& argv);
  ~RankProcess();

  // The rest of the first stdout line starting with `prefix` (lines before it
  // are dropped).
  absl::StatusOr<std::string> WaitLine(const std::string& prefix,
                                       std::chrono::milliseconds timeout);
  // Waits for the exit; returns the wait status, or -1 if still running.
  int WaitExit(std::chrono::milliseconds timeout);
  void Signal(int sig);
  bool running() { return WaitExit(std::chrono::milliseconds(0)) == -1; }
  std::string Stderr() const;

 private:
  RankProcess() = default;
  static inline std::atomic<int> counter_{0};
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int exit_status_ = -1;
  std::string buffer_;
  std::string stderr_path_;
};

// The flags of rank `rank` of a group of `size` (KV cache 1024 x 16 tokens,
// 256 positions, prefill in chunks of 3 tokens: each a logged, replayed pass).
// The last 12 entries are the --tp-* / --rendezvous* / --collective-timeout-s
// / --prefill-chunk-tokens flags, which a TP = 1 worker drops.
std::vector<std::string> WorkerArgs(int size, int rank, const std::string& rendezvous,
                                    double collective_timeout_s, const std::string& model);

// A worker group of `size` rank processes serving `model` (a fixture name or
// a directory); rank 0 is ranks[0] and the group's only gRPC endpoint. Size 1
// is a plain TP = 1 worker (no rendezvous, whole-prompt prefill). `extra`
// flags go to every rank (e.g. --startup-profile=false).
struct WorkerGroup {
  std::vector<std::unique_ptr<RankProcess>> ranks;
  std::string address;  // rank 0's gRPC endpoint

  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(
      int size, double collective_timeout_s = 3, const std::string& model = kTargetModel,
      const std::vector<std::string>& extra = {});
};

}  // namespace treespec::testing
