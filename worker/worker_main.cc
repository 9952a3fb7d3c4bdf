// treespec-worker: serves the target model over gRPC. With --tp-size N > 1
// the model is sharded over N processes (worker/group_setup.h): rank 0 serves
// gRPC and leads, ranks > 0 follow it (worker/rank_loop.h) and serve nothing.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <atomic>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/model/config.h"
#include "core/model/hybrid.h"
#include "core/model/llama.h"
#include "core/model/sequence_model.h"
#include "core/tensor/backend.h"
#include "core/util/periodic.h"
#include "core/util/status_macros.h"
#include "core/tensor/dtype.h"
#include "rpc/cost_profile.h"
#include "rpc/service_main.h"
#include "rpc/signals.h"
#include "worker/group_service.h"
#include "worker/group_setup.h"
#include "worker/rank_loop.h"
#include "worker/target_runner.h"
#include "worker/verify_profiler.h"
#include "worker/worker_service.h"
#include "worker/worker_telemetry.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face model directory of the target (Llama family, Mamba, Mamba-2 or the "
          "Mamba-2 + attention hybrid Bamba), or a llama-family .gguf file");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");
ABSL_FLAG(int64_t, kv_blocks, 0, "KV cache blocks of --kv_block_size tokens (0: from --kv_tokens)");
ABSL_FLAG(int64_t, kv_tokens, 65536, "KV cache capacity in tokens when --kv_blocks is 0");
ABSL_FLAG(int64_t, kv_block_size, 16, "Tokens per KV cache block");
ABSL_FLAG(int64_t, max_context, 2048, "Longest prompt + completion per sequence");
ABSL_FLAG(int64_t, max_tree_nodes, 128, "Largest token tree per sequence per step (root included)");
ABSL_FLAG(int64_t, max_sequences, 256, "Most concurrently open sequences");
ABSL_FLAG(int64_t, prefill_chunk_tokens, 256,
          "Longest prompt piece prefilled at once; live streams' steps run between pieces");
ABSL_FLAG(double, prefill_share, 0.15,
          "What a waiting prompt's piece may add to a live Verify pass it rides on, and to the "
          "live streams' usual pass (0.15: 15%); larger: an earlier first token for the "
          "prompt, a less steady pace for live streams");
ABSL_FLAG(double, sequence_lease_s, 60,
          "Seconds after its last Open/Verify that a sequence is released (its client is presumed "
          "gone); 0: never");
ABSL_FLAG(int32_t, tp_size, 1, "Tensor-parallel group size (processes sharing the model)");
ABSL_FLAG(int32_t, tp_rank, 0,
          "This process's rank in the group; rank 0 serves gRPC. -1: the number after the last "
          "'-' of the hostname (a Kubernetes StatefulSet pod's ordinal)");
ABSL_FLAG(std::string, rendezvous, "",
          "HOST:PORT of rank 0's rendezvous store (rank 0 listens on PORT; 0: any free port, "
          "printed as 'rendezvous on HOST:PORT')");
ABSL_FLAG(std::string, tp_host, "",
          "Address the other ranks reach this rank on (default: the local address of the "
          "connection to the rendezvous)");
ABSL_FLAG(double, rendezvous_timeout_s, 300,
          "How long to retry reaching the rendezvous and to wait for every rank to join and load");
ABSL_FLAG(double, collective_timeout_s, 30,
          "Bound on one collective; a rank silent this long is considered gone");
ABSL_FLAG(bool, startup_profile, true,
          "Profile the verify step at start-up (or read the cached profile) and report it to the "
          "coordinator, so that auto trees are planned with the right costs from the first step");
ABSL_FLAG(std::string, cost_cache_dir, "",
          "Directory of cached start-up profiles, keyed by model, device and dtype (empty: "
          "$TREESPEC_CACHE_DIR, $XDG_CACHE_HOME/treespec or ~/.cache/treespec; 'none': no cache)");

namespace treespec {
namespace {

using std::chrono::milliseconds;

milliseconds Ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

// --tp-rank, or with -1 the StatefulSet ordinal at the end of the hostname.
absl::StatusOr<int> TpRank() {
  const int flag = absl::GetFlag(FLAGS_tp_rank);
  if (flag >= 0) return flag;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  const std::string host = name;
  int ordinal = -1;
  const size_t dash = host.rfind('-');
  if (dash == std::string::npos || !absl::SimpleAtoi(host.substr(dash + 1), &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp-rank -1: hostname '", host, "' does not end in -ORDINAL (not a StatefulSet pod?)"));
  }
  return ordinal;
}

// "cuda:N[:dtype]" -> N; anything else -> 0.
int CudaDeviceIndex(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  int index = 0;
  if (parts.size() > 1 && parts[0] == "cuda" && !absl::SimpleAtoi(parts[1], &index)) index = 0;
  return index;
}

TargetRunnerOptions RunnerOptions() {
  TargetRunnerOptions options;
  options.max_context = absl::GetFlag(FLAGS_max_context);
  options.max_tree_nodes = absl::GetFlag(FLAGS_max_tree_nodes);
  options.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  options.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  options.prefill_share = absl::GetFlag(FLAGS_prefill_share);
  options.sequence_lease = absl::Seconds(absl::GetFlag(FLAGS_sequence_lease_s));
  return options;
}

SequenceModelOptions ModelOptions() {
  SequenceModelOptions o;
  o.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  o.kv_blocks = absl::GetFlag(FLAGS_kv_blocks);
  if (o.kv_blocks <= 0) {
    o.kv_blocks = (absl::GetFlag(FLAGS_kv_tokens) + o.kv_block_size - 1) /
                  std::max<int64_t>(o.kv_block_size, 1);
  }
  o.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  o.max_tail_nodes = absl::GetFlag(FLAGS_max_tree_nodes);
  return o;
}

// Releases sequences whose lease ran out, a few times per lease.
std::unique_ptr<Periodic> StartLeaseSweeper(TargetRunner* runner) {
  const absl::Duration lease = runner->options().sequence_lease;
  if (lease <= absl::ZeroDuration()) return nullptr;
  const absl::Duration period = std::min(absl::Seconds(1), lease / 4);
  return std::make_unique<Periodic>(period, [runner] {
    if (int n = runner->ReleaseExpired(); n > 0) {
      std::fprintf(stderr, "treespec-worker: released %d sequences whose lease expired\n", n);
    }
  });
}

WorkerIdentity Identity(const std::string& model_dir, const ModelConfig& mc, Backend* backend,
                        int tp_size) {
  WorkerIdentity id;
  id.model = model_dir.substr(model_dir.find_last_of('/') + 1);
  id.device = backend->name();
  id.tp_size = tp_size;
  for (int64_t e : mc.eos_token_ids) id.eos_token_ids.push_back(static_cast<int32_t>(e));
  return id;
}

// The verify step's cost profile, from the cache or measured now. Never
// fatal: without one the coordinator learns the costs online.
v1::VerifyCostProfile StartupProfile(TargetRunner* runner, const std::string& model_dir,
                                     Backend* backend, int tp_size) {
  v1::VerifyCostProfile out;
  if (!absl::GetFlag(FLAGS_startup_profile)) return out;
  std::string dir = absl::GetFlag(FLAGS_cost_cache_dir);
  if (dir.empty()) dir = DefaultCostCacheDir();
  if (dir == "none") dir.clear();
  const std::string model_key = absl::StrCat("verify ", ModelIdentity(model_dir));
  const std::string device_key =
      absl::StrCat(absl::GetFlag(FLAGS_device), " ", backend->name(), " ",
                   DTypeName(backend->activation_dtype()), " threads ",
                   std::thread::hardware_concurrency(), " tp ", tp_size, " build ",
                   EngineBuildId().substr(0, 16));
  auto measure = [&]() -> absl::StatusOr<StepCostModel> {
    StepCostModel m;
    TS_ASSIGN_OR_RETURN(m.verify, MeasureVerifyCost(runner, VerifyProfileOptions()));
    return m;
  };
  absl::StatusOr<LoadedProfile> p = LoadOrMeasureProfile(dir, model_key, device_key, measure, std::cerr);
  if (!p.ok()) {
    std::cerr << "treespec-worker: warning: no verify cost profile: " << p.status().message()
              << std::endl;
    return out;
  }
  ToProto(*p, &out);
  std::cerr << "treespec-worker: verify cost profile ("
            << (p->source == v1::COST_PROFILE_SOURCE_CACHE
                    ? std::string("cached")
                    : absl::StrCat("measured in ", p->profile_ns / 1000000, " ms"))
            << "): step " << out.per_step_s() * 1e3 << " ms + " << out.per_sequence_s() * 1e3
            << " ms/sequence + " << out.per_token_s() * 1e3 << " ms/token + "
            << out.per_context_token_s() * 1e6 << " us/context token, knee "
            << out.knee_tokens() << std::endl;
  return out;
}

// Serves `service` until SIGTERM/SIGINT. `on_started` runs once the server
// is up, `after_drain` once in-flight calls have finished (server still alive).
int Serve(v1::Worker::Service* service, const std::function<void(grpc::Server*)>& on_started,
          const std::function<void()>& after_drain) {
  auto obs = StartServiceObservability("treespec-worker", absl::GetFlag(FLAGS_tp_rank));
  if (!obs.ok()) return FailService(obs.status());
  RegisterWorkerTelemetry(service, obs->get());
  auto server = StartServiceServer({service}, obs->get());
  if (!server.ok()) return FailService(server.status());
  if (on_started) on_started(server->server.get());
  return ServeUntilSignal(&*server, obs->get(), after_drain);
}

int SingleRank(const std::string& model_dir, Backend* backend, const ModelConfig& mc) {
  auto model = LoadSequenceModel(model_dir, backend, nullptr, ModelOptions());
  if (!model.ok()) return FailService(model.status());
  TargetRunnerOptions options = RunnerOptions();
  if (absl::Status st = options.Validate(); !st.ok()) return FailService(st);
  TargetRunner runner(model->get(), options);
  WorkerIdentity identity = Identity(model_dir, mc, backend, 1);
  identity.verify_cost = StartupProfile(&runner, model_dir, backend, 1);
  std::unique_ptr<Periodic> sweeper = StartLeaseSweeper(&runner);
  WorkerService service(&runner, std::move(identity));
  return Serve(&service, nullptr, nullptr);
}

// Rank > 0: follows rank 0's steps until it says stop. Serves no gRPC; its
// health port and metrics say it is alive. Sets `done` once it has stopped.
int Follow(WorkerGroup* group, SequenceModel* model, int rank, int size,
           std::atomic<bool>* done) {
  // SIGTERM: keep following until rank 0 says stop, for at most the grace.
  std::thread([] {
    WaitForTerminationSignal();
    std::this_thread::sleep_for(GetServiceFlags().shutdown_grace);
    std::_Exit(0);
  }).detach();
  std::fprintf(stderr, "treespec-worker rank %d of %d: following rank 0\n", rank, size);
  auto follower_obs = StartServiceObservability("treespec-worker", rank);
  if (!follower_obs.ok()) return FailService(follower_obs.status());
  (*follower_obs)->SetServing(true);
  absl::Status st = RunFollower(group->control.get(), model);
  done->store(true);
  if (!st.ok()) {
    return FailService(absl::Status(st.code(), absl::StrCat("rank ", rank, ": ", st.message())));
  }
  return 0;
}

// Rank 0: leads the group's steps and serves gRPC; a failed group closes the
// rendezvous sessions and reports NOT_SERVING.
int Lead(WorkerGroup* group, const GroupOptions& g, SequenceModel* model,
         GroupHealth* health, const TargetRunnerOptions& options, WorkerIdentity identity,
         const std::string& model_dir, Backend* backend) {
  GroupLeaderOptions lo;
  lo.heartbeat_interval = g.HeartbeatInterval();
  lo.name_grace = g.collective_timeout;
  GroupLeader leader(group->control.get(), group->data(), model, health, lo);
  TargetRunner runner(&leader, options);
  identity.verify_cost = StartupProfile(&runner, model_dir, backend, identity.tp_size);
  std::unique_ptr<Periodic> sweeper = StartLeaseSweeper(&runner);
  WorkerService inner(&runner, std::move(identity));
  GroupGatedWorkerService service(&inner, health);
  RendezvousServer* store_server = group->server.get();
  // The failure callback may run on any thread, also while the server stops
  // and after this function returns (health outlives it), so what it reads is
  // shared with it, not a local it would find gone (UBSan saw a stale
  // grpc::Server pointer read from a dead frame).
  struct Serving {
    absl::Mutex mu;
    grpc::Server* server ABSL_GUARDED_BY(mu) = nullptr;
  };
  auto serving = std::make_shared<Serving>();
  auto on_started = [&, serving](grpc::Server* server) {
    {
      absl::MutexLock lock(&serving->mu);
      serving->server = server;
    }
    health->OnFailure([serving, store_server](const absl::Status& st) {
      std::cerr << "treespec-worker rank 0: " << st.message() << "; reporting NOT_SERVING"
                << std::endl;
      store_server->CloseSessions();
      absl::MutexLock lock(&serving->mu);
      if (serving->server != nullptr) {
        serving->server->GetHealthCheckService()->SetServingStatus(false);
      }
    });
  };
  auto after_drain = [&] {
    {
      absl::MutexLock lock(&serving->mu);
      serving->server = nullptr;
    }
    leader.Shutdown();
  };
  return Serve(&service, on_started, after_drain);
}

int TensorParallel(const std::string& model_dir, Backend* backend, const ModelConfig& mc) {
  absl::StatusOr<int> tp_rank = TpRank();
  if (!tp_rank.ok()) return FailService(tp_rank.status());
  GroupOptions g;
  g.rank = *tp_rank;
  g.size = absl::GetFlag(FLAGS_tp_size);
  g.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  g.host = absl::GetFlag(FLAGS_tp_host);
  g.rendezvous_timeout = Ms(absl::GetFlag(FLAGS_rendezvous_timeout_s));
  g.collective_timeout = Ms(absl::GetFlag(FLAGS_collective_timeout_s));
  g.cuda_device = CudaDeviceIndex(absl::GetFlag(FLAGS_device));
  if (absl::Status st = g.Validate(); !st.ok()) return FailService(st);
  TargetRunnerOptions options = RunnerOptions();
  if (absl::Status st = options.Validate(); !st.ok()) return FailService(st);

  // Every rank refuses a model that does not split, before joining anyone.
  if (mc.arch == Architecture::kLlama) {
    absl::Status st = LlamaModel::CheckShardable(mc.llama, g.size);
    if (!st.ok()) return FailService(st);
  } else if (mc.arch == Architecture::kMamba2 || mc.arch == Architecture::kHybrid) {
    absl::Status st = HybridModel::CheckShardable(mc.hybrid, g.size);
    if (!st.ok()) return FailService(st);
  } else {
    return FailService(absl::InvalidArgumentError(absl::StrCat(
        "--tp-size ", g.size, ": a ", mc.architecture_name, " target cannot be tensor-parallel")));
  }
  const int rank = g.rank;
  GroupHealth health(g.size);
  auto announce = [](const std::string& address) {
    std::printf("rendezvous on %s\n", address.c_str());
    std::fflush(stdout);
  };
  // A follower whose leader is gone has nothing left to do. Its Gloo wait
  // fails too, but this is faster; the pause lets a clean shutdown (rank 0's
  // last frame, then its exit) finish first.
  static std::atomic<bool> follower_done{false};
  auto leader_lost = [rank](const std::string& reason) {
    std::this_thread::sleep_for(milliseconds(500));
    if (follower_done.load()) return;
    std::cerr << "treespec-worker rank " << rank << ": " << reason << "; exiting" << std::endl;
    std::_Exit(3);
  };
  auto group = JoinWorkerGroup(g, backend, rank == 0 ? &health : nullptr, announce, leader_lost);
  if (!group.ok()) return FailService(group.status());
  const SequenceModelOptions model_options = ModelOptions();
  auto model = LoadSequenceModel(model_dir, backend, (*group)->data(), model_options);
  if (!model.ok()) return FailService(model.status());
  const std::string fingerprint =
      absl::StrCat(Identity(model_dir, mc, backend, g.size).model, " vocab ",
                   (*model)->info().vocab_size, " layers ", (*model)->info().num_layers, " kv ",
                   model_options.kv_blocks, "x", model_options.kv_block_size);
  if (absl::Status st = AwaitGroupReady(group->get(), g, fingerprint, rank == 0 ? &health : nullptr);
      !st.ok()) {
    return FailService(st);
  }

  if (rank > 0) {
    return Follow(group->get(), model->get(), rank, g.size, &follower_done);
  }
  return Lead(group->get(), g, model->get(), &health, options,
              Identity(model_dir, mc, backend, g.size), model_dir, backend);
}

int Main() {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return FailService(absl::InvalidArgumentError("--model is required"));
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return FailService(backend.status());
  auto mc = LoadModelConfig(model_dir);
  if (!mc.ok()) return FailService(mc.status());
  if (absl::GetFlag(FLAGS_tp_size) == 1 && absl::GetFlag(FLAGS_tp_rank) <= 0) {
    return SingleRank(model_dir, backend->get(), *mc);
  }
  return TensorParallel(model_dir, backend->get(), *mc);
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::InitServiceMain(
      argc, argv,
      "Serves a target model for speculative verification.\n"
      "Usage: treespec-worker --model DIR --listen HOST:PORT [--device cpu|cuda]\n"
      "       [--tp-size N --tp-rank R --rendezvous HOST:PORT]");
  return treespec::Main();
}
