// spec_bench: plain vs speculative decoding through the real services.
// Starts treespec-worker and one treespec-drafter per kind as processes on
// loopback, drives an in-process Coordinator over gRPC clients, and prints,
// for concurrency 1, 4 and 16: tokens/s, mean accepted length and the mean
// per-step time split into draft (drafter's own time in Draft calls), verify
// (worker's forward + acceptance) and coordinator + RPC (the rest of the step
// loop), and draft-ahead's hit rate (hits / steps whose candidates were asked
// for) and its wait for the candidates after the Verify, per step, and "cpu
// ms": the coordinator's own CPU time per step on its step path (the lane
// thread, its gRPC client work included), which unlike the wall times does
// not grow with the machine's load; then the mean sequences per lane step
// ("batch": fewer than the clients while requests are admitted), and the
// requests' mean time to the first token and to the last ("ttft ms", "req
// ms", from their final Timings). Draft-ahead is off by default (and on a
// GPU drafter, pre-drafting too); compare it with the default in one run by
// naming a drafter twice, e.g. ahead:mamba=models/demo/mamba-drafter|--draft_ahead=1.
// Every configuration runs once untimed with short requests before each
// concurrency's timed runs (--warmup).
// With --rounds R every configuration runs R times, plain and speculative
// interleaved (plain, drafter 1, drafter 2, plain, ...), and the table gives
// the mean tokens/s and the median of the per-round speedups over plain,
// which is robust to a noisy shared machine. Each run's speedup is over the
// plain rate interpolated at its place between its round's plain run and
// the next one (one more plain run closes the last round): a shared
// machine's speed drifts within a round, and a configuration run last in
// it was otherwise compared with a plain rate measured several runs before.
//
//   build/bin/spec_bench [--target models/demo/target]
//       [--drafters mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,
//                   eagle=models/demo/eagle-head,eagle3=models/demo/eagle3-head,
//                   redrafter=models/demo/redrafter-head]
//       (eagle kinds and redrafter get --target TARGET: the head reads its embedding and LM
//       head; redrafter's beam: e.g. redrafter=models/demo/redrafter-head|--beam_width=2)
//       (a useless drafter: useless:transformer=build/useless-drafter, written by
//       tools/models/randomize_weights.py; extra drafter flags after '|', e.g.
//       nopre:mamba=models/demo/mamba-drafter|--predraft=0)
//       [--trees "auto;chain:4;3,2,2,1,1"] [--max_tokens 128] [--requests_per_client 2]
//       [--concurrency 1,4,16,64] [--rounds 3]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "coordinator/coordinator.h"
#include "core/util/cli_args.h"

ABSL_FLAG(std::string, target, "models/demo/target", "Target model directory");
ABSL_FLAG(std::string, drafters, "mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,"
          "eagle=models/demo/eagle-head,eagle3=models/demo/eagle3-head,"
          "redrafter=models/demo/redrafter-head",
          "[NAME:]KIND=DIR[|--flag=value ...][,...] (NAME defaults to KIND; flags after '|' "
          "go to that treespec-drafter)");
ABSL_FLAG(std::string, trees, "auto;chain:4;3,2,2,1,1",
          "';'-separated tree shapes of the speculative runs (auto: planned per step)");
ABSL_FLAG(std::string, concurrency, "1,4,16,64", "Concurrent clients per run");
ABSL_FLAG(std::string, bandit_trees, treespec::CoordinatorOptions().bandit_trees,
          "The shapes auto chooses among (the coordinator's --bandit_trees)");
ABSL_FLAG(int32_t, rounds, 1, "Interleaved repetitions of every configuration");
ABSL_FLAG(int32_t, max_tokens, 128, "Tokens per request");
ABSL_FLAG(int32_t, requests_per_client, 2, "Requests each client sends in sequence");
ABSL_FLAG(std::string, bin, "build/bin", "Directory of treespec-worker and treespec-drafter");
ABSL_FLAG(std::string, device, "cpu", "Worker and drafter backend");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature (0: greedy)");
ABSL_FLAG(bool, per_round, false,
          "After each row, print every round's x plain (in round order), with its tokens/s and the "
          "interpolated plain rate it is compared with, on stderr");
ABSL_FLAG(bool, warmup, true,
          "Before each concurrency's timed runs, run every configuration once, untimed, with "
          "16-token requests");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  std::string address;
};

// Spawns `args`, waits for its "listening on HOST:PORT" line.
Child Spawn(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  Child c{pid, ""};
  std::string line;
  char ch;
  while (read(fds[0], &ch, 1) == 1) {
    if (ch != '\n') {
      line.push_back(ch);
      continue;
    }
    if (line.rfind("listening on ", 0) == 0) {
      c.address = line.substr(13);
      break;
    }
    line.clear();
  }
  close(fds[0]);
  return c;
}

void Kill(Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  waitpid(c.pid, nullptr, 0);
  c.pid = -1;
}

struct RunResult {
  double tokens_per_s = 0;
  double mean_accepted = 0;
  double step_ms = 0, draft_ms = 0, verify_ms = 0, other_ms = 0;
  double rpc_ms = 0;     // RPC wall time beyond the services' reported compute
  double handler_ms = 0; // of which the worker's Verify handler outside its forward pass
  double coord_ms = 0;   // the step loop outside both RPCs
  double cpu_ms = 0;     // the coordinator's step-path CPU per step (LaneStepStats::loop_cpu_ns)
  double ahead_hit = 0;  // draft-ahead hits / steps whose candidates were asked for
  double wait_ms = 0;    // per step, the wait for draft-ahead candidates after the Verify
  double batch = 0;      // sequences per lane step (the requests' steps / the lanes' steps)
  double ttft_ms = 0;    // mean time from receipt to the first token
  double total_ms = 0;   // mean time from receipt to the last token
  int64_t tokens = 0;
};

// Requests that failed (submit refused or stream ended in an error): any
// makes the program exit non-zero, since its table then means nothing.
std::atomic<int64_t> failed_requests{0};

RunResult Run(Coordinator* coordinator, const std::string& drafter, const std::string& tree,
              int clients, int max_tokens, int per_client) {
  const LaneStepStats before = coordinator->TotalStats();
  std::atomic<int64_t> tokens{0}, steps{0}, accepted{0}, ahead_steps{0}, ahead_hits{0};
  std::atomic<int64_t> requests{0}, ttft_ns{0}, total_ns{0};
  const char* prompts[] = {"Once upon a time, there was a little", "One day, a boy named Tom",
                           "The sun was shining and", "Lily and her mom went to the",
                           "There was a big red ball in", "A little bird wanted to"};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int r = 0; r < per_client; ++r) {
        v1::GenerateRequest req;
        req.set_text(prompts[(c * per_client + r) % 6]);
        req.set_max_tokens(max_tokens);
        req.mutable_sampling()->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
        req.mutable_sampling()->set_seed(c * 1000 + r);
        req.mutable_speculation()->set_drafter(drafter);
        req.mutable_speculation()->set_tree(tree);
        auto st = coordinator->Submit(req, Clock::now(), std::nullopt);
        if (!st.ok()) {
          if (failed_requests++ < 3) std::fprintf(stderr, "submit: %s\n", st.status().ToString().c_str());
          return;
        }
        while (true) {
          v1::GenerateResponse chunk;
          bool done = false;
          absl::Status status;
          if ((*st)->Pop(absl::Milliseconds(50), &chunk, &done, &status)) {
            if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
              tokens += chunk.usage().completion_tokens();
              steps += chunk.speculation().steps();
              accepted += chunk.speculation().accepted_tokens();
              ahead_steps += chunk.speculation().draft_ahead_steps();
              ahead_hits += chunk.speculation().draft_ahead_hits();
              requests += 1;
              ttft_ns += chunk.timings().ttft_ns();
              total_ns += chunk.timings().total_ns();
            }
            continue;
          }
          if (done) {
            if (!status.ok() && failed_requests++ < 3) {
              std::fprintf(stderr, "request: %s\n", status.ToString().c_str());
            }
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const LaneStepStats after = coordinator->TotalStats();
  RunResult r;
  r.tokens = tokens.load();
  r.tokens_per_s = tokens.load() / secs;
  r.mean_accepted = steps.load() > 0 ? static_cast<double>(accepted.load() + steps.load()) / steps.load() : 1.0;
  const double n = std::max<int64_t>(1, after.steps - before.steps);
  r.step_ms = (after.loop_ns - before.loop_ns) / n / 1e6;
  r.batch = steps.load() / n;
  r.ttft_ms = requests.load() > 0 ? ttft_ns.load() / 1e6 / requests.load() : 0.0;
  r.total_ms = requests.load() > 0 ? total_ns.load() / 1e6 / requests.load() : 0.0;
  r.draft_ms = (after.drafter_reported_ns - before.drafter_reported_ns) / n / 1e6;
  r.verify_ms = (after.worker_forward_ns - before.worker_forward_ns) / n / 1e6;
  r.other_ms = r.step_ms - r.draft_ms - r.verify_ms;
  const double draft_wall = (after.draft_ns - before.draft_ns) / n / 1e6;
  const double verify_wall = (after.verify_ns - before.verify_ns) / n / 1e6;
  r.rpc_ms = (draft_wall - r.draft_ms) + (verify_wall - r.verify_ms);
  r.handler_ms = (after.worker_handler_ns - before.worker_handler_ns) / n / 1e6 - r.verify_ms;
  // The wait for draft-ahead candidates after the Verify is part of the
  // step loop outside the Draft and Verify calls: it counts in "wait ms",
  // not in "coord ms".
  r.wait_ms = (after.ahead_wait_ns - before.ahead_wait_ns) / n / 1e6;
  r.cpu_ms = (after.loop_cpu_ns - before.loop_cpu_ns) / n / 1e6;
  r.coord_ms = r.step_ms - draft_wall - verify_wall - r.wait_ms;
  r.ahead_hit = ahead_steps.load() > 0 ? static_cast<double>(ahead_hits.load()) / ahead_steps.load()
                                       : 0.0;
  return r;
}

// The floor under "rpc ms": the median round trip of a call that does no
// work on the same channel, back to back and after 0.5 ms idle (as a step's
// RPCs come: the threads on both sides have gone to sleep in the meantime,
// and waking them is most of the difference). Two calls: a unary
// GetWorkerInfo, and a Verify of no steps, which goes on the step stream
// (rpc/step_stream.h) as every step's Verify does.
void PrintRpcFloor(WorkerClient* worker) {
  const v1::VerifyRequest empty;
  for (const bool stream : {false, true}) {
    for (const int gap_us : {0, 500}) {
      std::vector<double> us;
      for (int i = 0; i < 200; ++i) {
        if (gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
        const auto t0 = Clock::now();
        const bool ok = stream ? worker->Verify(empty, std::chrono::milliseconds(1000)).ok()
                               : worker->Info(std::chrono::milliseconds(1000)).ok();
        if (!ok) return;
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      std::printf("empty worker %s round trip%s: median %.0f us, p90 %.0f us\n",
                  stream ? "step-stream Verify" : "unary RPC", gap_us > 0 ? " after 0.5 ms idle" : "",
                  us[us.size() / 2], us[us.size() * 9 / 10]);
    }
  }
}

int Main() {
  const std::string bin = absl::GetFlag(FLAGS_bin), device = absl::GetFlag(FLAGS_device);
  std::vector<Child> children;
  Child worker = Spawn({bin + "/treespec-worker", "--model", absl::GetFlag(FLAGS_target),
                        "--listen", "127.0.0.1:0", "--device", device});
  if (worker.address.empty()) {
    std::fprintf(stderr, "worker did not start\n");
    return 1;
  }
  children.push_back(worker);
  std::vector<std::unique_ptr<WorkerClient>> workers;
  workers.push_back(MakeGrpcWorkerClient(worker.address, {}));
  PrintRpcFloor(workers[0].get());
  std::vector<DrafterSpec> drafters;
  std::vector<std::string> names;
  for (absl::string_view kd : absl::StrSplit(absl::GetFlag(FLAGS_drafters), ',', absl::SkipEmpty())) {
    // NAME:KIND=DIR[|--flag=value ...]: extra treespec-drafter flags after '|'.
    std::vector<std::string> fl = absl::StrSplit(kd, absl::MaxSplits('|', 1));
    std::vector<std::string> p = absl::StrSplit(fl[0], absl::MaxSplits('=', 1));
    std::vector<std::string> nk = absl::StrSplit(p[0], absl::MaxSplits(':', 1));
    if (nk.size() == 2) p[0] = nk[1];
    const std::string name = nk[0];
    std::vector<std::string> args = {bin + "/treespec-drafter", "--kind", p[0], "--model", p[1],
                                     "--listen", "127.0.0.1:0", "--device", device};
    if (p[0] == "eagle" || p[0] == "eagle3" || p[0] == "redrafter") {
      args.push_back("--target");  // the head reads the target's embedding and LM head
      args.push_back(absl::GetFlag(FLAGS_target));
    }
    if (fl.size() == 2) {
      for (absl::string_view f : absl::StrSplit(fl[1], ' ', absl::SkipEmpty())) {
        args.emplace_back(f);
      }
    }
    Child d = Spawn(args);
    if (d.address.empty()) {
      std::fprintf(stderr, "drafter %s did not start\n", p[0].c_str());
      for (Child& c : children) Kill(c);
      return 1;
    }
    children.push_back(d);
    drafters.push_back({name, MakeGrpcDrafterClient(d.address, {})});
    names.push_back(name);
  }
  auto tok = LoadTokenizer(absl::GetFlag(FLAGS_target));
  if (!tok.ok()) {  // the prompts are text
    std::fprintf(stderr, "spec_bench: %s\n", tok.status().ToString().c_str());
    for (Child& c : children) Kill(c);
    return 1;
  }
  CoordinatorOptions options;
  options.max_batch = 64;
  options.bandit_trees = absl::GetFlag(FLAGS_bandit_trees);
  options.default_max_tokens = absl::GetFlag(FLAGS_max_tokens);
  auto coordinator = Coordinator::Create(options, std::move(workers), std::move(drafters),
                                         std::move(*tok));
  if (!coordinator.ok() || !(*coordinator)->Start().ok()) {
    std::fprintf(stderr, "coordinator failed\n");
    for (Child& c : children) Kill(c);
    return 1;
  }
  std::vector<int> conc;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',')) {
    conc.push_back(std::stoi(std::string(c)));
  }
  Run(coordinator->get(), "none", "", 1, absl::GetFlag(FLAGS_max_tokens), 1);  // first request
  std::vector<std::pair<std::string, std::string>> configs = {{"none", "-"}};
  for (const std::string& name : names) {
    for (absl::string_view tree : absl::StrSplit(absl::GetFlag(FLAGS_trees), ';', absl::SkipEmpty())) {
      configs.push_back({name, std::string(tree)});
    }
  }
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::printf("\n%-12s %-11s %5s %10s %8s %9s %9s %9s %11s %8s %7s %8s %8s %7s %6s %7s %7s %6s"
              " %8s %8s\n",
              "drafter", "tree", "conc", "tokens/s", "speedup", "accepted", "step ms", "draft ms",
              "verify ms", "other ms", "rpc ms", "handler", "coord ms", "min x", "ahead", "wait ms",
              "cpu ms", "batch", "ttft ms", "req ms");
  for (int c : conc) {
    // Warm-up, untimed: every configuration once with short requests, so no
    // timed run pays a process's first use of a batch size (lazy CUDA graph
    // captures, allocator growth, a drafter's first Open).
    for (size_t k = 0; k < configs.size() && absl::GetFlag(FLAGS_warmup); ++k) {
      const std::string tree = configs[k].second == "-" ? "" : configs[k].second;
      Run(coordinator->get(), configs[k].first, tree, c, 16, 1);
    }
    // [config][round]
    std::vector<std::vector<RunResult>> runs(configs.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < configs.size(); ++k) {
        const std::string tree = configs[k].second == "-" ? "" : configs[k].second;
        runs[k].push_back(Run(coordinator->get(), configs[k].first, tree, c,
                              absl::GetFlag(FLAGS_max_tokens),
                              absl::GetFlag(FLAGS_requests_per_client)));
      }
    }
    // The plain run that closes the last round (not in the plain row's means).
    double closing = runs[0].back().tokens_per_s;
    if (configs.size() > 1) {
      closing = Run(coordinator->get(), "none", "", c, absl::GetFlag(FLAGS_max_tokens),
                    absl::GetFlag(FLAGS_requests_per_client))
                    .tokens_per_s;
    }
    // Plain's rate at configuration k's place in `round`: interpolated
    // between the round's plain run (place 0) and the next round's (place
    // configs.size()).
    const auto plain_at = [&](size_t k, int round) {
      const double a = runs[0][round].tokens_per_s;
      const double b = round + 1 < rounds ? runs[0][round + 1].tokens_per_s : closing;
      return a + (b - a) * static_cast<double>(k) / static_cast<double>(configs.size());
    };
    for (size_t k = 0; k < configs.size(); ++k) {
      RunResult mean;
      std::vector<double> ratios;
      for (int round = 0; round < rounds; ++round) {
        const RunResult& r = runs[k][round];
        mean.tokens_per_s += r.tokens_per_s / rounds;
        mean.mean_accepted += r.mean_accepted / rounds;
        mean.step_ms += r.step_ms / rounds;
        mean.draft_ms += r.draft_ms / rounds;
        mean.verify_ms += r.verify_ms / rounds;
        mean.other_ms += r.other_ms / rounds;
        mean.rpc_ms += r.rpc_ms / rounds;
        mean.handler_ms += r.handler_ms / rounds;
        mean.coord_ms += r.coord_ms / rounds;
        mean.ahead_hit += r.ahead_hit / rounds;
        mean.wait_ms += r.wait_ms / rounds;
        mean.cpu_ms += r.cpu_ms / rounds;
        mean.batch += r.batch / rounds;
        mean.ttft_ms += r.ttft_ms / rounds;
        mean.total_ms += r.total_ms / rounds;
        ratios.push_back(r.tokens_per_s / plain_at(k, round));
      }
      if (absl::GetFlag(FLAGS_per_round)) {
        std::string line;
        for (int round = 0; round < rounds; ++round) {
          absl::StrAppendFormat(&line, " %.2fx (%.0f vs %.0f)", ratios[round],
                                runs[k][round].tokens_per_s, plain_at(k, round));
        }
        if (k == 0 && configs.size() > 1) {
          absl::StrAppendFormat(&line, ", closing plain %.0f", closing);
        }
        std::fprintf(stderr, "%s c=%d rounds:%s\n", configs[k].first.c_str(), c, line.c_str());
      }
      std::sort(ratios.begin(), ratios.end());
      char sp[16], lo[16];
      std::snprintf(sp, sizeof(sp), "%.2fx", ratios[ratios.size() / 2]);
      std::snprintf(lo, sizeof(lo), "%.2fx", ratios.front());
      std::printf(
          "%-12s %-11s %5d %10.1f %8s %9.2f %9.2f %9.2f %11.2f %8.2f %7.2f %8.2f %8.2f %7s %5.0f%% "
          "%7.2f %7.3f %6.1f %8.1f %8.1f\n",
          configs[k].first.c_str(), configs[k].second.c_str(), c, mean.tokens_per_s, sp,
          mean.mean_accepted, mean.step_ms, mean.draft_ms, mean.verify_ms, mean.other_ms,
          mean.rpc_ms, mean.handler_ms, mean.coord_ms, lo, 100 * mean.ahead_hit, mean.wait_ms,
          mean.cpu_ms, mean.batch, mean.ttft_ms, mean.total_ms);
    }
    std::fflush(stdout);
  }
  coordinator->reset();
  for (Child& c : children) Kill(c);
  if (failed_requests > 0) {
    std::fprintf(stderr, "spec_bench: %lld requests failed; the table above is not valid\n",
                 static_cast<long long>(failed_requests.load()));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
