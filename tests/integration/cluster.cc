#include "tests/integration/cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <latch>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/config.h"
#include "core/util/status_macros.h"
#include "drafter_service/draft_profiler.h"
#include "rpc/cost_profile.h"
#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"
#include "worker/verify_profiler.h"

namespace treespec::testing {
namespace {

constexpr auto kShutdownGrace = std::chrono::milliseconds(500);

void ShutdownServer(std::unique_ptr<RunningServer>* server) {
  if (*server == nullptr) return;
  (*server)->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server->reset();
}

// The coordinator's worker client with a pause before every Verify.
class DelayedWorkerClient final : public WorkerClient {
 public:
  DelayedWorkerClient(std::unique_ptr<WorkerClient> inner, std::chrono::milliseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  const std::string& address() const override { return inner_->address(); }
  absl::StatusOr<v1::WorkerOpenResponse> Open(const v1::WorkerOpenRequest& req,
                                              std::chrono::milliseconds timeout) override {
    return inner_->Open(req, timeout);
  }
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& req,
                                            std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(delay_);
    return inner_->Verify(req, timeout);
  }
  absl::Status Release(const v1::ReleaseRequest& req, std::chrono::milliseconds timeout) override {
    return inner_->Release(req, timeout);
  }
  absl::StatusOr<v1::WorkerInfo> Info(std::chrono::milliseconds timeout) override {
    return inner_->Info(timeout);
  }

 private:
  std::unique_ptr<WorkerClient> inner_;
  std::chrono::milliseconds delay_;
};

}  // namespace

std::string FixtureModel(const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return SourceDir() + "/tests/fixtures/models/" + name;
}

std::string BinaryPath(const std::string& name) { return BinaryDir() + "/bin/" + name; }

// ---------------------------------------------------------------- workers

absl::StatusOr<std::unique_ptr<InProcessWorker>> InProcessWorker::Start(
    const WorkerConfig& config) {
  auto w = std::unique_ptr<InProcessWorker>(new InProcessWorker());
  const std::string dir = FixtureModel(config.model);
  TS_RETURN_IF_ERROR(config.runner.Validate());
  TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(dir));
  w->backend_ = CreateCpuBackend();
  SequenceModelOptions mo;
  mo.kv_blocks = config.kv_blocks;
  mo.kv_block_size = config.kv_block_size;
  mo.max_sequences = config.runner.max_sequences;
  mo.max_tail_nodes = config.runner.max_tree_nodes;
  TS_ASSIGN_OR_RETURN(w->model_, LoadSequenceModel(dir, w->backend_.get(), nullptr, mo));
  w->runner_ = std::make_unique<TargetRunner>(w->model_.get(), config.runner);
  WorkerIdentity id;
  id.model = config.model;
  id.device = w->backend_->name();
  for (int64_t e : mc.eos_token_ids) id.eos_token_ids.push_back(static_cast<int32_t>(e));
  if (config.startup_profile) {
    TargetRunner* runner = w->runner_.get();
    auto measure = [runner]() -> absl::StatusOr<StepCostModel> {
      StepCostModel m;
      TS_ASSIGN_OR_RETURN(m.verify, MeasureVerifyCost(runner, VerifyProfileOptions()));
      return m;
    };
    TS_ASSIGN_OR_RETURN(LoadedProfile p,
                        LoadOrMeasureProfile("", config.model, id.device, measure, std::cerr));
    ToProto(p, &id.verify_cost);
  }
  w->service_ = std::make_unique<WorkerService>(w->runner_.get(), id);
  TS_ASSIGN_OR_RETURN(RunningServer server, StartServer("127.0.0.1:0", {w->service_.get()}));
  w->address_ = server.address;
  w->server_ = std::make_unique<RunningServer>(std::move(server));
  return w;
}

InProcessWorker::~InProcessWorker() { Shutdown(); }

void InProcessWorker::Shutdown() { ShutdownServer(&server_); }

std::unique_ptr<v1::Worker::Stub> InProcessWorker::NewStub() const {
  return v1::Worker::NewStub(MakeChannel(address_, {}));
}

// ---------------------------------------------------------------- drafters

absl::StatusOr<std::unique_ptr<InProcessDrafter>> InProcessDrafter::Start(
    const DrafterConfig& config) {
  auto d = std::unique_ptr<InProcessDrafter>(new InProcessDrafter());
  DrafterOptions options;
  options.kind = config.kind;
  options.model_dir = FixtureModel(config.model);
  if (!config.target.empty()) options.target_dir = FixtureModel(config.target);
  options.max_sequences = config.max_sequences;
  options.max_tree_nodes = config.max_tree_nodes;
  options.max_context = config.max_context;
  options.beam_width = config.beam_width;
  options.beam_length = config.beam_length;
  d->backend_ = CreateCpuBackend();
  TS_ASSIGN_OR_RETURN(d->drafter_, CreateDrafter(options, d->backend_.get()));
  d->service_ = std::make_unique<DrafterService>(d->drafter_.get(), config.model);
  if (config.startup_profile) {
    Drafter* drafter = d->drafter_.get();
    auto measure = [&]() -> absl::StatusOr<StepCostModel> {
      StepCostModel m;
      TS_ASSIGN_OR_RETURN(m.draft, MeasureDraftCost(drafter, config.max_sequences,
                                                    config.max_tree_nodes, DraftProfileOptions()));
      return m;
    };
    TS_ASSIGN_OR_RETURN(LoadedProfile p,
                        LoadOrMeasureProfile("", config.model, "cpu", measure, std::cerr));
    v1::DraftCostProfile proto;
    ToProto(p, &proto);
    d->service_->SetStartupProfile(std::move(proto), drafter->Stats());
  }
  TS_ASSIGN_OR_RETURN(RunningServer server, StartServer("127.0.0.1:0", {d->service_.get()}));
  d->address_ = server.address;
  d->server_ = std::make_unique<RunningServer>(std::move(server));
  return d;
}

InProcessDrafter::~InProcessDrafter() { Shutdown(); }

void InProcessDrafter::Shutdown() { ShutdownServer(&server_); }

std::unique_ptr<v1::Drafter::Stub> InProcessDrafter::NewStub() const {
  return v1::Drafter::NewStub(MakeChannel(address_, {}));
}

// ---------------------------------------------------------------- coordinator

absl::StatusOr<std::unique_ptr<InProcessCoordinator>> InProcessCoordinator::Start(
    CoordinatorConfig config) {
  auto c = std::unique_ptr<InProcessCoordinator>(new InProcessCoordinator());
  std::vector<std::unique_ptr<WorkerClient>> workers;
  for (const std::string& a : config.workers) {
    std::unique_ptr<WorkerClient> client = MakeGrpcWorkerClient(a, {});
    if (config.verify_delay.count() > 0) {
      client = std::make_unique<DelayedWorkerClient>(std::move(client), config.verify_delay);
    }
    workers.push_back(std::move(client));
  }
  std::vector<DrafterSpec> drafters;
  for (const auto& [name, address] : config.drafters) {
    drafters.push_back({name, MakeGrpcDrafterClient(address, {})});
  }
  if (config.options.startup_timeout > std::chrono::milliseconds(10000)) {
    config.options.startup_timeout = std::chrono::milliseconds(10000);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (!config.tokenizer.empty()) {
    TS_ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(config.tokenizer));
  }
  TS_ASSIGN_OR_RETURN(c->coordinator_,
                      Coordinator::Create(config.options, std::move(workers), std::move(drafters),
                                          std::move(tokenizer)));
  TS_RETURN_IF_ERROR(c->coordinator_->Start());
  c->service_ = std::make_unique<GenerationService>(c->coordinator_.get());
  TS_ASSIGN_OR_RETURN(RunningServer server, StartServer("127.0.0.1:0", {c->service_.get()}));
  c->address_ = server.address;
  c->server_ = std::make_unique<RunningServer>(std::move(server));
  return c;
}

InProcessCoordinator::~InProcessCoordinator() {
  Shutdown();
  coordinator_.reset();
}

void InProcessCoordinator::Shutdown() { ShutdownServer(&server_); }

std::unique_ptr<v1::Generation::Stub> InProcessCoordinator::NewStub() const {
  return v1::Generation::NewStub(MakeChannel(address_, {}));
}

// ---------------------------------------------------------------- requests

v1::GenerateRequest MakeRequest(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                const std::string& drafter, const std::string& tree,
                                bool ignore_eos) {
  v1::GenerateRequest req;
  req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(ignore_eos);
  req.mutable_speculation()->set_drafter(drafter);
  req.mutable_speculation()->set_tree(tree);
  return req;
}

std::vector<std::vector<int32_t>> GreedyReference(const std::vector<std::vector<int32_t>>& prompts,
                                                  int max_tokens, const std::string& model) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  auto local = LocalModel::Load(FixtureModel(model), "cpu",
                                static_cast<int64_t>(std::max<size_t>(prompts.size(), 1)),
                                static_cast<int64_t>(longest) + max_tokens + 1);
  EXPECT_TRUE(local.ok()) << local.status();
  if (!local.ok()) return out;
  absl::Status st =
      (*local)->Generate(prompts, SamplingParams{}, std::vector<uint64_t>(prompts.size(), 0),
                         max_tokens, {}, [&](size_t i, int32_t t) { out[i].push_back(t); });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

std::vector<int32_t> TestPrompt(int index, int length) {
  std::vector<int32_t> p;
  for (int i = 0; i < length; ++i) {
    p.push_back(static_cast<int32_t>((index * 37 + i * 11 + 5) % (kVocab - 3)) + 3);
  }
  return p;
}

GenerateResult RunGenerate(v1::Generation::Stub* stub, const v1::GenerateRequest& request,
                           const GenerateOptions& options) {
  GenerateResult out;
  grpc::ClientContext ctx;
  if (options.deadline.has_value()) {
    ctx.set_deadline(std::chrono::system_clock::now() + *options.deadline);
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&ctx, request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    ++out.num_chunks;
    out.ids.insert(out.ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    out.text += chunk.text();
    if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out.final_chunk = chunk;
      out.has_final = true;
    }
    if (options.on_chunk) options.on_chunk(out);
    if (options.cancel_after_chunks >= 0 && out.num_chunks == options.cancel_after_chunks) {
      ctx.TryCancel();
    }
  }
  out.status = reader->Finish();
  return out;
}

std::vector<GenerateResult> RunConcurrently(v1::Generation::Stub* stub,
                                            const std::vector<v1::GenerateRequest>& requests) {
  std::vector<GenerateResult> out(requests.size());
  std::latch start(static_cast<std::ptrdiff_t>(requests.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      out[i] = RunGenerate(stub, requests[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

int32_t WorkerSequences(v1::Worker::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::WorkerInfo info;
  if (!stub->GetWorkerInfo(&ctx, v1::GetWorkerInfoRequest(), &info).ok()) return -1;
  return info.num_sequences();
}

int32_t DrafterSequences(v1::Drafter::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::DrafterInfoResponse info;
  if (!stub->GetDrafterInfo(&ctx, v1::GetDrafterInfoRequest(), &info).ok()) return -1;
  return info.num_sequences();
}

// ---------------------------------------------------------------- cluster

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(ClusterConfig config) {
  auto c = std::unique_ptr<Cluster>(new Cluster());
  CoordinatorConfig cc;
  if (config.worker_addresses.empty()) {
    TS_ASSIGN_OR_RETURN(c->worker_, InProcessWorker::Start(config.worker));
    cc.workers = {c->worker_->address()};
  } else {
    cc.workers = config.worker_addresses;
  }
  cc.options = config.coordinator;
  if (cc.options.default_drafter.empty()) cc.options.default_drafter = "none";
  cc.verify_delay = config.verify_delay;
  cc.tokenizer = config.tokenizer;
  auto add = [&](bool enabled, const std::string& name, DrafterConfig dc) -> absl::Status {
    if (!enabled) return absl::OkStatus();
    TS_ASSIGN_OR_RETURN(std::unique_ptr<InProcessDrafter> d, InProcessDrafter::Start(dc));
    cc.drafters.push_back({name, d->address()});
    c->drafters_.push_back({name, std::move(d)});
    return absl::OkStatus();
  };
  // The token drafters the tests compare, each with the cluster's sizes.
  auto token_drafter = [&config](std::string kind, std::string model) {
    DrafterConfig dc;
    dc.kind = std::move(kind);
    dc.model = std::move(model);
    dc.max_sequences = config.drafter_max_sequences;
    dc.startup_profile = config.drafter_startup_profile;
    return dc;
  };
  TS_RETURN_IF_ERROR(add(config.mamba, "mamba", token_drafter("mamba", kMambaModel)));
  TS_RETURN_IF_ERROR(add(config.self, "self", token_drafter("transformer", config.worker.model)));
  TS_RETURN_IF_ERROR(add(config.garbage, "garbage", token_drafter("transformer", kGarbageModel)));
  TS_RETURN_IF_ERROR(add(config.ngram, "ngram", token_drafter("ngram", config.worker.model)));
  for (const auto& [name, dc] : config.extra_drafters) TS_RETURN_IF_ERROR(add(true, name, dc));
  TS_ASSIGN_OR_RETURN(c->coordinator_, InProcessCoordinator::Start(std::move(cc)));
  c->stub_ = c->coordinator_->NewStub();
  return c;
}

Cluster::~Cluster() {
  stub_.reset();
  coordinator_.reset();
  drafters_.clear();
  worker_.reset();
}

InProcessDrafter* Cluster::drafter(const std::string& name) {
  for (auto& [n, d] : drafters_) {
    if (n == name) return d.get();
  }
  return nullptr;
}

// ---------------------------------------------------------------- processes

namespace {

// fork + exec of argv with the child's stdout on a pipe (returned in
// *stdout_fd); the child dies with this thread (PR_SET_PDEATHSIG).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int* stdout_fd) {
  if (argv.empty()) return absl::InvalidArgumentError("argv is empty");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(argv[0], " is not an executable (build it first)"));
  }
  // Everything the child touches is prepared before fork: after fork only
  // async-signal-safe calls run until exec.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);  // the duplicate does not inherit O_CLOEXEC
    // Drop every other inherited descriptor (listening sockets of in-process
    // servers must not live on in the child).
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      for (int fd = 3; fd < 4096; ++fd) close(fd);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  *stdout_fd = fds[0];
  return pid;
}

// Reads what is available on `fd` within `left`; false at EOF or error.
bool ReadSome(int fd, std::chrono::milliseconds left, std::string* out) {
  pollfd pfd{fd, POLLIN, 0};
  const int r = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
  if (r < 0) return errno == EINTR;
  if (r == 0) return true;
  char chunk[4096];
  const ssize_t n = read(fd, chunk, sizeof(chunk));
  if (n < 0) return errno == EINTR;
  if (n == 0) return false;
  out->append(chunk, static_cast<size_t>(n));
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                              std::chrono::milliseconds timeout) {
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  TS_ASSIGN_OR_RETURN(p->pid_, Spawn(argv, &p->stdout_fd_));
  const std::string what = absl::StrJoin(argv, " ");
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::string buffer;
  while (true) {
    const size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (absl::StartsWith(line, "listening on ")) {
        p->address_ = line.substr(std::strlen("listening on "));
        return p;
      }
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("`", what, "` printed no address in ", timeout.count(), " ms"));
    }
    if (!ReadSome(p->stdout_fd_, left, &buffer)) {
      const int status = p->Stop(SIGKILL, std::chrono::milliseconds(1000));
      return absl::UnavailableError(absl::StrCat(
          "`", what, "` exited before listening (wait status ", status, "); its stderr is above"));
    }
  }
}

absl::StatusOr<ProcessOutput> RunProcess(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout) {
  int fd = -1;
  TS_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, &fd));
  ProcessOutput out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (!ReadSome(fd, left, &out.stdout_text)) break;
  }
  close(fd);
  waitpid(pid, &out.wait_status, 0);
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        "`", absl::StrJoin(argv, " "), "` did not finish in ", timeout.count(), " ms"));
  }
  return out;
}

int Subprocess::Stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  const auto until = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) break;
    if (std::chrono::steady_clock::now() >= until) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
  return status;
}

Subprocess::~Subprocess() { Stop(SIGKILL, std::chrono::milliseconds(5000)); }

absl::StatusOr<std::unique_ptr<Subprocess>> StartDrafterProcess(
    const std::string& kind, const std::string& model, const std::string& listen,
    const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinaryPath("treespec-drafter"), "--kind", kind, "--model",
                                   FixtureModel(model), "--listen", listen, "--max-context", "512"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return Subprocess::Start(argv);
}

absl::StatusOr<std::unique_ptr<Subprocess>> StartWorkerProcess(const std::string& model,
                                                               const std::string& listen) {
  return Subprocess::Start({BinaryPath("treespec-worker"), "--model", FixtureModel(model),
                            "--listen", listen, "--max-context", "256", "--kv-tokens", "16384"});
}

}  // namespace treespec::testing
