// soak_bench: a long-running load test of the whole CPU demo cluster (issue 17
// point 5). Starts a worker, a drafter and a coordinator from build/bin on
// the demo models (models/demo) as child processes with their default
// settings, drives the coordinator with the load generator
// (tools/loadgen/runner.h) in a closed loop of --concurrency streams for
// --duration_s, and meanwhile samples each process's resident memory
// (/proc/PID/status VmRSS) and the worker's and drafter's open sequences and
// KV blocks / state slots (GetWorkerInfo, GetDrafterInfo).
//
// The workload is what users send by default: text prompts of 1-4 lines of
// models/demo/heldout_prompts.txt, max_tokens from 8 to 256, EOS honoured,
// drafter and tree left to the coordinator (its default drafter, tree=auto);
// every third request samples at temperature 0.8 without a seed, the others
// are greedy; every --cancel_every-th request is cancelled by its client after
// its first token.
//
// It prints one row per sample, the load generator's summary, the memory
// drift of each process (RSS one minute in vs at the end of the load, and the
// least-squares slope over the samples after the first minute) and what the
// worker and drafter still hold once the load is over, checked well inside
// their sequence lease (60 s by default), so that only the coordinator's own
// releases count. Exits 1 on any request error or anything left open.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/cli_args.h"
#include "core/util/status_macros.h"
#include "rpc/server.h"
#include "tools/loadgen/runner.h"
#include "tools/loadgen/stats.h"
#include "treespec/v1/drafter.grpc.pb.h"
#include "treespec/v1/generation.grpc.pb.h"
#include "treespec/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, bin_dir, "build/bin", "Directory of the service binaries");
ABSL_FLAG(std::string, models, "models/demo", "Demo models directory");
ABSL_FLAG(std::string, drafter_kind, "mamba", "Drafter: mamba or transformer (its demo model)");
ABSL_FLAG(double, duration_s, 600, "Seconds of load");
ABSL_FLAG(int32_t, concurrency, 256, "Concurrent streams (closed loop)");
ABSL_FLAG(double, sample_interval_s, 15, "Seconds between samples");
ABSL_FLAG(int64_t, cancel_every, 25, "Cancel every Nth request after its first token (0: none)");
ABSL_FLAG(std::string, log_dir, "", "Where the services' stderr goes (empty: a fresh /tmp dir)");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

// A service binary as a child process; killed (SIGTERM, then SIGKILL) when
// destroyed, and dies with this process (PR_SET_PDEATHSIG).
class Child {
 public:
  static absl::StatusOr<std::unique_ptr<Child>> Start(const std::string& name,
                                                      const std::vector<std::string>& argv,
                                                      const std::string& log_dir);
  ~Child();
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0; }

 private:
  pid_t pid_ = -1;
  std::string address_;
};

absl::StatusOr<std::unique_ptr<Child>> Child::Start(const std::string& name,
                                                    const std::vector<std::string>& argv,
                                                    const std::string& log_dir) {
  const std::string out_path = absl::StrCat(log_dir, "/", name, ".out");
  const std::string err_path = absl::StrCat(log_dir, "/", name, ".err");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  auto c = std::unique_ptr<Child>(new Child());
  c->pid_ = pid;
  for (int i = 0; i < 1200; ++i) {  // 120 s: the start-up profiles may be measured
    std::ifstream in(out_path);
    for (std::string line; std::getline(in, line);) {
      if (absl::StartsWith(line, "listening on ")) {
        c->address_ = line.substr(13);
        return c;
      }
    }
    if (!c->alive()) {
      return absl::UnavailableError(absl::StrCat(name, " exited before listening; see ", err_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(name, " did not listen in 120 s; see ", err_path));
}

Child::~Child() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

double RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

struct Holdings {
  int32_t worker_sequences = -1;
  int64_t kv_blocks_used = -1;
  int32_t drafter_sequences = -1;
  int64_t drafter_slots_used = -1;
};

Holdings Query(v1::Worker::Stub* worker, v1::Drafter::Stub* drafter) {
  Holdings h;
  grpc::ClientContext wc;
  wc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WorkerInfo wi;
  if (worker->GetWorkerInfo(&wc, v1::GetWorkerInfoRequest(), &wi).ok()) {
    h.worker_sequences = wi.num_sequences();
    h.kv_blocks_used = wi.kv_blocks_used();
  }
  grpc::ClientContext dc;
  dc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::DrafterInfoResponse di;
  if (drafter->GetDrafterInfo(&dc, v1::GetDrafterInfoRequest(), &di).ok()) {
    h.drafter_sequences = di.num_sequences();
    h.drafter_slots_used = di.slots_total() - di.slots_free();
  }
  return h;
}

absl::StatusOr<std::vector<v1::GenerateRequest>> Workload(const std::string& models) {
  std::ifstream in(models + "/heldout_prompts.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) {
    return absl::NotFoundError(absl::StrCat("--models: no prompts in ", models,
                                            "/heldout_prompts.txt"));
  }
  const int32_t max_tokens[] = {8, 32, 64, 128, 256, 48, 96};
  std::vector<v1::GenerateRequest> out;
  for (int i = 0; i < 210; ++i) {
    v1::GenerateRequest r;
    std::vector<std::string> parts;
    for (int k = 0; k <= i % 4; ++k) parts.push_back(lines[(i * 7 + k) % lines.size()]);
    r.set_text(absl::StrJoin(parts, " "));
    r.set_max_tokens(max_tokens[i % 7]);
    if (i % 3 == 2) r.mutable_sampling()->set_temperature(0.8f);
    out.push_back(std::move(r));
  }
  return out;
}

struct Sample {
  double t_s = 0;
  double rss[3] = {0, 0, 0};  // worker, drafter, coordinator
  Holdings held;
  int64_t done = 0, errors = 0;
};

// Least-squares slope of RSS (MiB per minute) over samples at t >= from_s.
double SlopePerMinute(const std::vector<Sample>& s, int proc, double from_s) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Sample& x : s) {
    if (x.t_s < from_s) continue;
    const double t = x.t_s / 60.0;
    n += 1, sx += t, sy += x.rss[proc], sxx += t * t, sxy += t * x.rss[proc];
  }
  if (n < 2 || n * sxx - sx * sx == 0) return 0;
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

void PrintSample(const Sample& s) {
  std::printf("%7.0f %10.1f %10.1f %10.1f %8d %8lld %8d %8lld %9lld %7lld\n", s.t_s, s.rss[0],
              s.rss[1], s.rss[2], s.held.worker_sequences,
              static_cast<long long>(s.held.kv_blocks_used), s.held.drafter_sequences,
              static_cast<long long>(s.held.drafter_slots_used), static_cast<long long>(s.done),
              static_cast<long long>(s.errors));
  std::fflush(stdout);
}

void PrintDrift(const std::vector<Sample>& samples, double duration_s) {
  const char* names[] = {"worker", "drafter", "coordinator"};
  const double from = std::min(60.0, duration_s / 2);
  const Sample* first = nullptr;
  for (const Sample& s : samples) {
    if (s.t_s >= from) {
      first = &s;
      break;
    }
  }
  const Sample& last = samples.back();
  if (first == nullptr) first = &last;
  std::printf("\nresident memory (MiB)  at %.0f s  at end (%.0f s)     drift   slope after %.0f s\n",
              first->t_s, last.t_s, from);
  for (int p = 0; p < 3; ++p) {
    std::printf("  %-12s %14.1f %14.1f %+9.1f %+10.2f MiB/min\n", names[p], first->rss[p],
                last.rss[p], last.rss[p] - first->rss[p], SlopePerMinute(samples, p, from));
  }
}

struct Services {
  std::unique_ptr<Child> worker, drafter, coordinator;
};

absl::StatusOr<Services> StartServices(const std::string& bin, const std::string& models,
                                       const std::string& kind, const std::string& log_dir) {
  Services s;
  TS_ASSIGN_OR_RETURN(s.worker, Child::Start("worker", {bin + "/treespec-worker", "--model",
                                                        models + "/target", "--listen",
                                                        "127.0.0.1:0"}, log_dir));
  TS_ASSIGN_OR_RETURN(s.drafter,
                      Child::Start("drafter", {bin + "/treespec-drafter", "--kind", kind,
                                               "--model", models + "/" + kind + "-drafter",
                                               "--listen", "127.0.0.1:0"}, log_dir));
  TS_ASSIGN_OR_RETURN(
      s.coordinator,
      Child::Start("coordinator",
                   {bin + "/treespec-coordinator", "--listen", "127.0.0.1:0", "--workers",
                    s.worker->address(), "--drafters", kind + "=" + s.drafter->address(),
                    "--tokenizer", models + "/target"}, log_dir));
  return s;
}

// After the load: the summary, the drift, and what the worker and drafter
// still hold (polled for up to 10 s, far inside their 60 s lease).
int Report(const loadgen::LoadRun& run, const std::vector<Sample>& samples, const Holdings& idle,
           v1::Worker::Stub* worker, v1::Drafter::Stub* drafter, double duration_s) {
  const loadgen::Summary summary = loadgen::Summarize(run.results, run.duration_s, {});
  std::printf("\nload (tools/loadgen):\n%s", loadgen::FormatTable(summary).c_str());
  PrintDrift(samples, duration_s);
  const Clock::time_point t0 = Clock::now();
  Holdings after = Query(worker, drafter);
  auto clean = [&] {
    return after.worker_sequences == 0 && after.kv_blocks_used == idle.kv_blocks_used &&
           after.drafter_sequences == 0 && after.drafter_slots_used == idle.drafter_slots_used;
  };
  while (!clean() && Clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = Query(worker, drafter);
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("\nheld after the load (%.1f s after the last request)   before load   after\n",
              waited);
  std::printf("  worker open sequences %31d %7d\n", idle.worker_sequences, after.worker_sequences);
  std::printf("  worker KV blocks used %31lld %7lld\n", static_cast<long long>(idle.kv_blocks_used),
              static_cast<long long>(after.kv_blocks_used));
  std::printf("  drafter open sequences %30d %7d\n", idle.drafter_sequences,
              after.drafter_sequences);
  std::printf("  drafter state slots used %28lld %7lld\n",
              static_cast<long long>(idle.drafter_slots_used),
              static_cast<long long>(after.drafter_slots_used));
  const int64_t errors = summary.num_requests - summary.num_ok - summary.num_client_cancelled;
  std::printf("\nsoak_bench: %s (%lld errors, %s)\n",
              errors == 0 && clean() ? "PASS" : "FAIL", static_cast<long long>(errors),
              clean() ? "nothing left open" : "sequences or KV blocks left open");
  return errors == 0 && clean() ? 0 : 1;
}

// Samples every --sample_interval_s until `finished`.
std::vector<Sample> SampleUntil(const std::atomic<bool>& finished, const pid_t pids[3],
                                v1::Worker::Stub* worker, v1::Drafter::Stub* drafter,
                                const std::atomic<int64_t>& done,
                                const std::atomic<int64_t>& errors) {
  std::vector<Sample> samples;
  const Clock::time_point t0 = Clock::now();
  auto sample = [&] {
    Sample s;
    s.t_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int p = 0; p < 3; ++p) s.rss[p] = RssMiB(pids[p]);
    s.held = Query(worker, drafter);
    s.done = done.load();
    s.errors = errors.load();
    PrintSample(s);
    return s;
  };
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_sample_interval_s)));
  for (Clock::time_point next = t0 + interval; !finished.load(); next += interval) {
    while (!finished.load() && Clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!finished.load()) samples.push_back(sample());
  }
  samples.push_back(sample());
  return samples;
}

int Main() {
  const std::string models = absl::GetFlag(FLAGS_models), kind = absl::GetFlag(FLAGS_drafter_kind);
  std::string log_dir = absl::GetFlag(FLAGS_log_dir);
  char tmpl[] = "/tmp/treespec-soak.XXXXXX";
  if (log_dir.empty()) log_dir = mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
  auto workload = Workload(models);
  if (!workload.ok()) return std::cerr << "soak_bench: " << workload.status() << std::endl, 2;
  auto services = StartServices(absl::GetFlag(FLAGS_bin_dir), models, kind, log_dir);
  if (!services.ok()) return std::cerr << "soak_bench: " << services.status() << std::endl, 2;
  auto worker = v1::Worker::NewStub(MakeChannel(services->worker->address(), {}));
  auto drafter = v1::Drafter::NewStub(MakeChannel(services->drafter->address(), {}));
  auto stub = v1::Generation::NewStub(MakeChannel(services->coordinator->address(), {}));
  const Holdings idle = Query(worker.get(), drafter.get());
  const pid_t pids[3] = {services->worker->pid(), services->drafter->pid(),
                         services->coordinator->pid()};

  loadgen::LoadOptions options;
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.duration_s = absl::GetFlag(FLAGS_duration_s);
  options.num_requests = int64_t{1} << 40;
  options.cancel_every = absl::GetFlag(FLAGS_cancel_every);
  options.progress_interval_s = 0;
  std::atomic<int64_t> done{0}, errors{0};
  options.on_result = [&](const loadgen::RequestResult& r) {
    done.fetch_add(1);
    if (!r.ok && !(r.client_cancelled && r.code == "CANCELLED") && errors.fetch_add(1) < 5) {
      std::fprintf(stderr, "soak_bench: request failed: %s: %s\n", r.code.c_str(),
                   r.message.c_str());
    }
  };
  std::printf("soak_bench: %d streams for %.0f s, every %lld-th cancelled after its first token; "
              "drafter %s; service logs in %s\n",
              options.concurrency, options.duration_s,
              static_cast<long long>(options.cancel_every), kind.c_str(), log_dir.c_str());
  std::printf("%7s %10s %10s %10s %8s %8s %8s %8s %9s %7s\n", "t (s)", "rss W MiB", "rss D MiB",
              "rss C MiB", "W seqs", "W kv", "D seqs", "D slots", "requests", "errors");
  absl::StatusOr<loadgen::LoadRun> run;
  std::atomic<bool> finished{false};
  std::thread load([&] {
    run = loadgen::RunLoad(stub.get(), *workload, options);
    finished.store(true);
  });
  std::vector<Sample> samples =
      SampleUntil(finished, pids, worker.get(), drafter.get(), done, errors);
  load.join();
  if (!run.ok()) return std::cerr << "soak_bench: " << run.status() << std::endl, 2;
  return Report(*run, samples, idle, worker.get(), drafter.get(), options.duration_s);
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Soak test of the CPU demo cluster: worker, drafter and coordinator processes under a "
      "closed loop of streams; prints memory, open sequences and KV blocks over time.\n"
      "Usage: soak_bench [--duration_s 600 --concurrency 256 --bin_dir build/bin "
      "--models models/demo]");
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
