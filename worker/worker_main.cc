// treespec-worker: serves the target model (one worker group, rank 0 when
// tensor-parallel) over gRPC.
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/util/cli_args.h"
#include "absl/strings/str_cat.h"
#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/tensor/backend.h"
#include "rpc/server.h"
#include "rpc/signals.h"
#include "worker/target_runner.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, model, "", "Hugging Face model directory of the target (Llama family)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve gRPC on (port 0: any free port)");
ABSL_FLAG(std::string, device, "cpu", "Backend: cpu, cuda, cuda:N, cuda:N:bf16");
ABSL_FLAG(int64_t, kv_blocks, 0, "KV cache blocks of --kv_block_size tokens (0: from --kv_tokens)");
ABSL_FLAG(int64_t, kv_tokens, 65536, "KV cache capacity in tokens when --kv_blocks is 0");
ABSL_FLAG(int64_t, kv_block_size, 16, "Tokens per KV cache block");
ABSL_FLAG(int64_t, max_context, 2048, "Longest prompt + completion per sequence");
ABSL_FLAG(int64_t, max_tree_nodes, 128, "Largest token tree per sequence per step (root included)");
ABSL_FLAG(int64_t, max_sequences, 256, "Most concurrently open sequences");
ABSL_FLAG(int32_t, shutdown_grace_s, 30, "Seconds in-flight calls may take after SIGTERM");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (enables TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle for client certificates");

namespace treespec {
namespace {

int Fail(const absl::Status& st) {
  std::cerr << "treespec-worker: " << st << std::endl;
  return 1;
}

int Main() {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return Fail(backend.status());
  auto mc = LoadModelConfig(model_dir);
  if (!mc.ok()) return Fail(mc.status());
  auto model = LlamaModel::Load(model_dir, backend->get());
  if (!model.ok()) return Fail(model.status());
  const int64_t block = absl::GetFlag(FLAGS_kv_block_size);
  int64_t blocks = absl::GetFlag(FLAGS_kv_blocks);
  if (blocks <= 0) blocks = (absl::GetFlag(FLAGS_kv_tokens) + block - 1) / std::max<int64_t>(block, 1);
  auto cache = PagedKvCache::Create((*model)->KvOptions(blocks, block), backend->get());
  if (!cache.ok()) return Fail(cache.status());
  TargetRunnerOptions options;
  options.max_context = absl::GetFlag(FLAGS_max_context);
  options.max_tree_nodes = absl::GetFlag(FLAGS_max_tree_nodes);
  options.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  if (absl::Status st = options.Validate(); !st.ok()) return Fail(st);
  TargetRunner runner(model->get(), cache->get(), options);
  WorkerIdentity id;
  id.model = model_dir.substr(model_dir.find_last_of('/') + 1);
  id.device = (*backend)->name();
  for (int64_t e : mc->eos_token_ids) id.eos_token_ids.push_back(static_cast<int32_t>(e));
  WorkerService service(&runner, id);
  TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  auto server = StartServer(absl::GetFlag(FLAGS_listen), {&service}, tls);
  if (!server.ok()) return Fail(server.status());
  std::printf("listening on %s\n", server->address.c_str());
  std::fflush(stdout);
  WaitForTerminationSignal();
  server->server->GetHealthCheckService()->SetServingStatus(false);
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_s)));
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::BlockTerminationSignals();
  absl::SetProgramUsageMessage(
      "Serves a target model for speculative verification.\n"
      "Usage: treespec-worker --model DIR --listen HOST:PORT [--device cpu|cuda]");
  std::vector<std::string> storage;
  std::vector<char*> args = treespec::NormalizeFlagNames(argc, argv, &storage);
  absl::ParseCommandLine(argc, args.data());
  return treespec::Main();
}
