// Test harness for the integration and fault tests: real treespec services on
// loopback gRPC.
//
// In-process servers run the real service classes on 127.0.0.1:0 —
// TargetRunner + WorkerService, CreateDrafter + DrafterService, Coordinator +
// GenerationService — each behind rpc/server.h StartServer, so every hop is a
// real gRPC call. Subprocess runs a service binary (build/bin/treespec-*) and
// reads the "listening on HOST:PORT" line it prints; it is killed (SIGKILL)
// and reaped in its destructor and dies with the test process
// (PR_SET_PDEATHSIG), so no test leaves an orphan behind.
//
// Models are the tiny fixtures in tests/fixtures/models (vocabulary 128,
// random weights, no tokenizer: prompts are token ids) unless a test names
// another model directory by its absolute path (with its tokenizer for text).
//
// Thread-safety: the servers are thread-safe (they are gRPC servers); the
// harness objects themselves are meant to be created and destroyed by the test
// thread. Subprocess must be created on the test's main thread (the death
// signal follows the thread that forked).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/coordinator.h"
#include "coordinator/generation_service.h"
#include "core/model/sequence_model.h"
#include "core/tensor/backend.h"
#include "drafter_service/drafter.h"
#include "drafter_service/drafter_service.h"
#include "grpcpp/grpcpp.h"
#include "rpc/server.h"
#include "treespec/v1/drafter.grpc.pb.h"
#include "treespec/v1/generation.grpc.pb.h"
#include "treespec/v1/worker.grpc.pb.h"
#include "worker/target_runner.h"
#include "worker/worker_service.h"

namespace treespec::testing {

// Absolute path of tests/fixtures/models/<name>; an absolute path is kept.
std::string FixtureModel(const std::string& name);
// Absolute path of <build>/bin/<name> (a service binary).
std::string BinaryPath(const std::string& name);

// The fixture models the tests use.
inline constexpr char kTargetModel[] = "tiny_llama_gqa";  // target, and its own drafter
inline constexpr char kMambaModel[] = "tiny_mamba";       // mamba drafter
inline constexpr char kGarbageModel[] = "tiny_llama3";    // a wrong transformer drafter
inline constexpr int kVocab = 128;

// ---------------------------------------------------------------- workers

struct WorkerConfig {
  std::string model = kTargetModel;
  int64_t kv_blocks = 1024;  // of kv_block_size tokens
  int64_t kv_block_size = 16;
  // The fixture target has 256 positions.
  TargetRunnerOptions runner{.max_context = 256};
  // Profile the verify step before serving (no cache) and report it in
  // WorkerInfo.verify_cost, as treespec-worker does by default.
  bool startup_profile = false;
};

class InProcessWorker {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessWorker>> Start(const WorkerConfig& config = {});
  ~InProcessWorker();

  const std::string& address() const { return address_; }
  TargetRunner* runner() { return runner_.get(); }
  std::unique_ptr<v1::Worker::Stub> NewStub() const;
  // Stops serving (in-flight calls are cancelled); idempotent.
  void Shutdown();

 private:
  InProcessWorker() = default;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SequenceModel> model_;
  std::unique_ptr<TargetRunner> runner_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<RunningServer> server_;
  std::string address_;
};

// ---------------------------------------------------------------- drafters

struct DrafterConfig {
  std::string kind = "mamba";  // "mamba" | "transformer" | "ngram" (model: for its vocabulary)
                               // | "eagle" | "eagle3" | "redrafter" (model: the head, target:
                               // its target)
  std::string model = kMambaModel;
  int64_t max_sequences = 32;
  int64_t max_tree_nodes = 64;
  int64_t max_context = 512;
  // Profile the Draft call before serving (no cache) and report it in
  // DrafterInfo.draft_cost, as treespec-drafter does by default.
  bool startup_profile = false;
  std::string target;  // eagle kinds, redrafter: the target's model directory
  int32_t beam_width = 3;   // redrafter
  int32_t beam_length = 4;  // redrafter
};

class InProcessDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessDrafter>> Start(const DrafterConfig& config);
  ~InProcessDrafter();

  const std::string& address() const { return address_; }
  Drafter* drafter() { return drafter_.get(); }
  std::unique_ptr<v1::Drafter::Stub> NewStub() const;
  void Shutdown();

 private:
  InProcessDrafter() = default;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<DrafterService> service_;
  std::unique_ptr<RunningServer> server_;
  std::string address_;
};

// ---------------------------------------------------------------- coordinator

struct CoordinatorConfig {
  CoordinatorOptions options;
  std::vector<std::string> workers;                           // addresses
  std::vector<std::pair<std::string, std::string>> drafters;  // name, address
  // Added before every Verify RPC the coordinator sends (through a client
  // decorator): stretches streams so that tests can act mid-stream.
  std::chrono::milliseconds verify_delay{0};
  // Model directory whose tokenizer encodes text prompts; empty: ids only.
  std::string tokenizer;
};

class InProcessCoordinator {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessCoordinator>> Start(CoordinatorConfig config);
  ~InProcessCoordinator();

  const std::string& address() const { return address_; }
  Coordinator* coordinator() { return coordinator_.get(); }
  std::unique_ptr<v1::Generation::Stub> NewStub() const;
  void Shutdown();

 private:
  InProcessCoordinator() = default;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<RunningServer> server_;
  std::string address_;
};

// ---------------------------------------------------------------- requests

// A greedy token-id request; drafter "none" decodes plainly. ignore_eos keeps
// outputs at exactly max_tokens so that comparisons cover every step.
v1::GenerateRequest MakeRequest(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                const std::string& drafter = "none", const std::string& tree = "",
                                bool ignore_eos = true);

// The target's plain greedy continuation of each prompt (max_tokens tokens,
// EOS ignored), decoded in process by LocalModel: the reference streams are
// compared with. `model`: a fixture name or a directory. Fails the calling
// test on error.
std::vector<std::vector<int32_t>> GreedyReference(const std::vector<std::vector<int32_t>>& prompts,
                                                  int max_tokens,
                                                  const std::string& model = kTargetModel);

// Deterministic distinct prompts of a few in-vocabulary token ids.
std::vector<int32_t> TestPrompt(int index, int length = 6);

struct GenerateResult {
  grpc::Status status;
  std::vector<int32_t> ids;          // all token ids, chunks concatenated
  std::string text;                  // all text deltas
  int num_chunks = 0;                // chunks received (the final one included)
  v1::GenerateResponse final_chunk;  // the chunk with a finish reason, if any
  bool has_final = false;
};

struct GenerateOptions {
  std::optional<std::chrono::milliseconds> deadline;  // from the call's start
  // Cancel the call (ClientContext::TryCancel) once this many chunks arrived.
  int cancel_after_chunks = -1;
  // Called on the reading thread after every chunk with the result so far.
  std::function<void(const GenerateResult&)> on_chunk;
};

// Runs one Generate call to the end.
GenerateResult RunGenerate(v1::Generation::Stub* stub, const v1::GenerateRequest& request,
                           const GenerateOptions& options = {});

// Runs `requests` concurrently, one thread each, all released at once.
std::vector<GenerateResult> RunConcurrently(v1::Generation::Stub* stub,
                                            const std::vector<v1::GenerateRequest>& requests);

// Polls `condition` every 10 ms until it holds or `timeout` passes; returns
// its last value.
template <typename F>
bool Eventually(F condition, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Live sequences on a worker / drafter, through their Info RPCs (-1 on error).
int32_t WorkerSequences(v1::Worker::Stub* stub);
int32_t DrafterSequences(v1::Drafter::Stub* stub);

// ---------------------------------------------------------------- cluster

// One in-process worker, the three drafters the tests compare ("mamba",
// "self": the target as its own transformer drafter, "garbage": tiny_llama3;
// the first and last have the fixture target's vocabulary)
// and a coordinator over them with no default drafter ("none").
struct ClusterConfig {
  WorkerConfig worker;  // worker.model is also the "self" drafter's model
  // Non-empty: serve through these running workers (e.g. a WorkerGroup of
  // processes, worker_group.h) instead of an in-process one; worker.model
  // still names their model for "self" and "ngram".
  std::vector<std::string> worker_addresses;
  bool mamba = true;
  bool self = true;
  bool garbage = true;
  bool ngram = true;  // "ngram": the model-free n-gram drafter (vocabulary of worker.model)
  // More drafters by name (e.g. EAGLE heads of worker.model).
  std::vector<std::pair<std::string, DrafterConfig>> extra_drafters;
  int64_t drafter_max_sequences = 32;  // of each drafter
  bool drafter_startup_profile = false;  // DrafterConfig::startup_profile of each drafter
  CoordinatorOptions coordinator;      // default_drafter "none" unless set
  std::chrono::milliseconds verify_delay{0};
  std::string tokenizer;  // see CoordinatorConfig
};

class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(ClusterConfig config = {});
  ~Cluster();

  InProcessWorker* worker() { return worker_.get(); }  // null with worker_addresses
  InProcessDrafter* drafter(const std::string& name);  // null if not started
  InProcessCoordinator* coordinator() { return coordinator_.get(); }
  v1::Generation::Stub* stub() { return stub_.get(); }

  GenerateResult Generate(const v1::GenerateRequest& request, const GenerateOptions& options = {}) {
    return RunGenerate(stub_.get(), request, options);
  }

 private:
  Cluster() = default;
  // Destruction order: coordinator first (its lanes call the others).
  std::unique_ptr<InProcessWorker> worker_;
  std::vector<std::pair<std::string, std::unique_ptr<InProcessDrafter>>> drafters_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

// ---------------------------------------------------------------- processes

// A service binary run as a child process. Start() returns once the child
// printed "listening on HOST:PORT" (or fails if it exits or stays silent past
// `timeout`). stdout is read for that line only (the services print nothing
// else there); stderr is inherited.
class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
  ~Subprocess();  // SIGKILL and reap if still running

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Sends `signal` and waits up to `timeout` for the exit (then SIGKILL).
  // Returns the wait status, or -1 if the child was already reaped.
  int Stop(int signal, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
};

struct ProcessOutput {
  int wait_status = -1;     // as from waitpid
  std::string stdout_text;  // everything the process wrote to stdout
};
// Runs a program to completion (SIGKILL after `timeout`, then an error),
// capturing its stdout; stderr is inherited.
absl::StatusOr<ProcessOutput> RunProcess(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout);

// `treespec-drafter --kind KIND --model DIR --listen LISTEN [extra...]` as a process.
absl::StatusOr<std::unique_ptr<Subprocess>> StartDrafterProcess(
    const std::string& kind, const std::string& model, const std::string& listen = "127.0.0.1:0",
    const std::vector<std::string>& extra = {});
// `treespec-worker --model DIR --listen LISTEN` as a process.
absl::StatusOr<std::unique_ptr<Subprocess>> StartWorkerProcess(
    const std::string& model = kTargetModel, const std::string& listen = "127.0.0.1:0");

}  // namespace treespec::testing
