// tp_bench: TP = 1 vs TP = 2 verify-step time on CPU for a ~110M Llama shape
// (random weights), through the real worker path: rank 0 runs a TargetRunner
// whose SequenceModel is a GroupLeader (step frame broadcast, then the sharded
// forward pass with its all-reduces and the LM-head all-gather, then
// acceptance and KV compaction); rank 1 runs RunFollower. Ranks are separate
// processes (forked) joined by Gloo over loopback. The time spent inside
// collectives is measured by the Gloo communicator itself (CommStats).
//
//   build-tp/bin/tp_bench [--tree_tokens 1,16] [--prefix 128] [--steps 30]
//                         [--threads N] [--tp 1,2]
//
// Each configuration gets fresh processes; --threads is the total OpenMP
// thread count, split evenly over the ranks (TP = 1 also runs with one
// thread per rank for a like-for-like comparison).
#include <netinet/in.h>
#include <omp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/rendezvous.h"
#include "core/model/llama.h"
#include "core/model/llama_sequence_model.h"
#include "core/util/cli_args.h"
#include "worker/group_health.h"
#include "worker/rank_loop.h"
#include "worker/target_runner.h"

ABSL_FLAG(std::string, tree_tokens, "1,16", "Tree sizes (nodes, root included) to time");
ABSL_FLAG(std::string, tp, "1,2", "Tensor-parallel sizes to time");
ABSL_FLAG(int32_t, prefix, 128, "Prompt tokens in the KV cache before the timed steps");
ABSL_FLAG(int32_t, steps, 30, "Timed verify steps per configuration (after 3 warm-up steps)");
ABSL_FLAG(int32_t, threads, 0, "Total OpenMP threads over all ranks (0: hardware threads)");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int tp = 1;
  int threads_per_rank = 1;
  int tree_tokens = 1;
};

struct Result {
  double step_ms = 0;       // median wall time of TargetRunner::Verify
  double forward_ms = 0;    // mean forward pass (StepTimings.forward_ns)
  double coll_ms = 0;       // mean time inside collectives per step (rank 0)
  double allreduce_ms = 0;
  double allgather_ms = 0;
  double broadcast_ms = 0;  // step frames
  double calls = 0;         // collectives per step
  double allreduce_1_us = 0;   // back-to-back all-reduce of [1, hidden] f32
  double allreduce_16_us = 0;  // back-to-back all-reduce of [16, hidden] f32
};

// Mean latency of `n` back-to-back all-reduces of [rows, hidden] (both ranks
// ready: transport cost alone, no waiting for a slower peer).
double AllReduceLatencyUs(Communicator* comm, int64_t rows, int64_t hidden, int n) {
  Tensor t = Tensor::Host(DType::kF32, {rows, hidden});
  (void)comm->Barrier();
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < n; ++i) (void)comm->AllReduceSum(&t);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
}

LlamaConfig Llama110M() {
  LlamaConfig lc;
  lc.vocab_size = 32000;
  lc.hidden_size = 768;
  lc.intermediate_size = 2048;
  lc.num_layers = 12;
  lc.num_heads = 12;
  lc.num_kv_heads = 12;
  lc.head_dim = 64;
  lc.tie_word_embeddings = true;
  lc.max_position_embeddings = 2048;
  return lc;
}

// A balanced binary tree of n nodes under `root` (sibling tokens distinct).
TokenTree Tree(int32_t root, int n, int step, int64_t vocab) {
  TokenTree t = TokenTree::Root(root);
  for (int i = 1; i < n; ++i) {
    t.AddNode((i - 1) / 2, static_cast<int32_t>((i * 7919 + step * 104729) % vocab));
  }
  return t;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

absl::Status Fail(const absl::Status& st, int rank) {
  std::fprintf(stderr, "tp_bench rank %d: %s\n", rank, st.ToString().c_str());
  return st;
}

// One rank of one configuration (a forked process). Rank 0 writes a Result
// to `out_fd`.
absl::Status RunRank(const Config& c, int rank, int port, int out_fd) {
  omp_set_num_threads(c.threads_per_rank);
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  const LlamaConfig lc = Llama110M();
  const int prefix = absl::GetFlag(FLAGS_prefix), steps = absl::GetFlag(FLAGS_steps);
  constexpr int kWarmup = 3;

  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<Communicator> comm;
  if (c.tp > 1) {
    RendezvousOptions ro;
    ro.address = absl::StrCat("127.0.0.1:", port);
    ro.rank = rank;
    ro.size = c.tp;
    ro.connect_timeout = std::chrono::seconds(60);
    ro.liveness_timeout = std::chrono::seconds(60);
    if (rank == 0) {
      auto s = RendezvousServer::Start(ro.address, ro);
      if (!s.ok()) return Fail(s.status(), rank);
      server = std::move(*s);
    }
    auto st = RendezvousClient::Connect(ro);
    if (!st.ok()) return Fail(st.status(), rank);
    store = std::move(*st);
    GlooOptions g;
    g.rank = rank;
    g.size = c.tp;
    g.comm.timeout = std::chrono::seconds(120);
    auto cm = CreateGlooCommunicator(g, store.get());
    if (!cm.ok()) return Fail(cm.status(), rank);
    comm = std::move(*cm);
  }
  double lat1 = 0, lat16 = 0;
  if (comm != nullptr) {
    lat1 = AllReduceLatencyUs(comm.get(), 1, lc.hidden_size, 300);
    lat16 = AllReduceLatencyUs(comm.get(), 16, lc.hidden_size, 300);
  }
  WeightLoader loader(/*seed=*/1, /*scale=*/0.02f, backend.get());
  auto llama = LlamaModel::Create(lc, &loader, comm.get());
  if (!llama.ok()) return Fail(llama.status(), rank);
  const int64_t tokens = prefix + (kWarmup + steps) * 8 + 256;
  auto model = LlamaSequenceModel::Create(std::move(*llama), (tokens + 64) / 16 + 4, 16);
  if (!model.ok()) return Fail(model.status(), rank);
  if (rank > 0) {
    absl::Status st = RunFollower(comm.get(), model->get());
    return st.ok() ? st : Fail(st, rank);
  }

  GroupHealth health(c.tp);
  std::unique_ptr<GroupLeader> leader;
  if (c.tp > 1) {
    GroupLeaderOptions lo;
    lo.heartbeat_interval = std::chrono::seconds(10);
    leader = std::make_unique<GroupLeader>(comm.get(), comm.get(), model->get(), &health, lo);
  }
  TargetRunnerOptions options;
  options.max_context = tokens;
  options.max_tree_nodes = 64;
  std::unique_ptr<TargetRunner> runner =
      leader != nullptr
          ? std::make_unique<TargetRunner>(leader.get(), options)
          : std::make_unique<TargetRunner>(model->get(), options);
  OpenSpec open;
  open.id = 1;
  for (int i = 0; i < prefix; ++i) open.prompt.push_back((i * 7919 + 17) % lc.vocab_size);
  std::vector<OpenOutcome> opened = runner->Open({open});
  if (!opened[0].status.ok()) return Fail(opened[0].status, rank);
  int32_t pending = opened[0].first_token;

  std::vector<double> wall;
  Result r;
  r.allreduce_1_us = lat1;
  r.allreduce_16_us = lat16;
  for (int s = 1; s <= kWarmup + steps; ++s) {
    if (s == kWarmup + 1 && comm != nullptr) comm->ResetStats();
    StepSpec step;
    step.id = 1;
    step.step = static_cast<uint64_t>(s);
    step.tree = Tree(pending, c.tree_tokens, s, lc.vocab_size);
    StepTimings timings;
    const Clock::time_point t0 = Clock::now();
    std::vector<StepOutcome> out = runner->Verify({step}, &timings);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!out[0].status.ok()) return Fail(out[0].status, rank);
    pending = out[0].tokens.back();
    if (s > kWarmup) {
      wall.push_back(ms);
      r.forward_ms += timings.forward_ns / 1e6 / steps;
    }
  }
  std::sort(wall.begin(), wall.end());
  r.step_ms = wall[wall.size() / 2];
  if (comm != nullptr) {
    const CommStats cs = comm->stats();
    r.coll_ms = cs.total_ns / 1e6 / steps;
    r.allreduce_ms = cs.allreduce_ns / 1e6 / steps;
    r.allgather_ms = cs.allgather_ns / 1e6 / steps;
    r.broadcast_ms = cs.broadcast_ns / 1e6 / steps;
    r.calls = static_cast<double>(cs.num_calls) / steps;
  }
  if (leader != nullptr) leader->Shutdown();
  if (write(out_fd, &r, sizeof(r)) != sizeof(r)) return absl::InternalError("pipe");
  return absl::OkStatus();
}

// Forks one process per rank; returns rank 0's result.
absl::StatusOr<Result> Measure(const Config& c) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe");
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < c.tp; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      _exit(RunRank(c, rank, port, fds[1]).ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  Result r;
  const bool got = read(fds[0], &r, sizeof(r)) == sizeof(r);
  close(fds[0]);
  bool ok = got;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) return absl::InternalError(absl::StrCat("tp ", c.tp, " tree ", c.tree_tokens, " failed"));
  return r;
}

std::vector<int> IntList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(p, &v) && v > 0) out.push_back(v);
  }
  return out;
}

int Main() {
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Config> configs;
  for (int n : IntList(absl::GetFlag(FLAGS_tree_tokens))) {
    for (int tp : IntList(absl::GetFlag(FLAGS_tp))) {
      const int per_rank = std::max(1, threads / tp);
      configs.push_back({tp, per_rank, n});
      if (tp == 1 && per_rank > 1) configs.push_back({tp, 1, n});
    }
  }
  const LlamaConfig lc = Llama110M();
  std::printf("llama %.1fM parameters (hidden %lld, %lld layers, %lld heads, vocab %lld), prefix %d "
              "tokens, %d timed steps, %d hardware threads\n",
              lc.NumParameters() / 1e6, static_cast<long long>(lc.hidden_size),
              static_cast<long long>(lc.num_layers), static_cast<long long>(lc.num_heads),
              static_cast<long long>(lc.vocab_size), absl::GetFlag(FLAGS_prefix),
              absl::GetFlag(FLAGS_steps), static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("\n%3s %8s %5s %9s %10s %10s %6s %10s %10s %10s %6s %12s\n", "tp", "thr/rank",
              "tree", "step ms", "forward ms", "coll ms", "coll %", "allreduce", "allgather",
              "frames", "calls", "AR1/AR16 us");
  for (const Config& c : configs) {
    absl::StatusOr<Result> r = Measure(c);
    if (!r.ok()) {
      std::printf("%3d %8d %5d  %s\n", c.tp, c.threads_per_rank, c.tree_tokens,
                  r.status().ToString().c_str());
      continue;
    }
    std::printf("%3d %8d %5d %9.2f %10.2f %10.2f %5.0f%% %10.2f %10.2f %10.2f %6.0f %5.0f/%-6.0f\n",
                c.tp, c.threads_per_rank, c.tree_tokens, r->step_ms, r->forward_ms, r->coll_ms,
                100.0 * r->coll_ms / r->step_ms, r->allreduce_ms, r->allgather_ms, r->broadcast_ms,
                r->calls, r->allreduce_1_us, r->allreduce_16_us);
    std::fflush(stdout);
  }
  std::printf("\ncoll ms: time rank 0 spent inside Gloo calls per step (waiting for the other rank "
              "included); frames: the step-log broadcasts; AR1/AR16: one all-reduce of [1|16, %lld] "
              "f32 back to back with both ranks ready (the transport alone).\n",
              static_cast<long long>(lc.hidden_size));
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
