// treespec-coordinator: the public Generation endpoint.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/coordinator.h"
#include "coordinator/generation_service.h"
#include "coordinator/http_backend.h"
#include "coordinator/telemetry.h"
#include "rpc/bearer_auth.h"
#include "rpc/server.h"
#include "rpc/service_main.h"

ABSL_FLAG(std::string, workers, "", "Worker group addresses ADDR[,ADDR...] (rank 0 of each)");
ABSL_FLAG(std::string, drafters, "",
          "Drafter replicas NAME=ADDR[,NAME=ADDR...]; replicas may share a name");
ABSL_FLAG(std::string, tokenizer, "",
          "Model directory (or .gguf file) whose tokenizer encodes text prompts");
ABSL_FLAG(std::string, default_drafter, "", "Drafter for speculation.drafter=auto (default: first)");
ABSL_FLAG(std::string, default_tree, "auto",
          "Tree shape when a request names none, or auto (planned per step by cost and acceptance)");
ABSL_FLAG(std::string, bandit_trees, treespec::CoordinatorOptions().bandit_trees,
          "Shapes tree=auto chooses among (';'-separated)");
ABSL_FLAG(int32_t, max_queue, 256, "Requests waiting for admission before RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_batch, 64, "Live sequences per (worker, drafter) lane");
ABSL_FLAG(int64_t, max_tree_nodes, 64, "Largest tree a request may ask for (root included)");
ABSL_FLAG(int32_t, default_max_tokens, 128, "max_tokens when a request gives 0");
ABSL_FLAG(int32_t, draft_timeout_ms, 5000, "Draft RPC deadline; slower drafts fall back");
ABSL_FLAG(int32_t, verify_timeout_ms, 60000, "Verify RPC deadline");
ABSL_FLAG(int32_t, draft_ahead, 2,
          "Draft-ahead: candidate trees per sequence asked from the drafter beside each Verify "
          "(capped by what it offers: its --predraft; 0: off). A matching outcome is verified "
          "at once, without a Draft call");
ABSL_FLAG(bool, draft_ahead_sampled, false,
          "Draft-ahead also for sampled requests (temperature > 0), whose bonus token is rarely "
          "guessed");
ABSL_FLAG(int32_t, startup_timeout_s, 60, "How long to wait for a worker at start-up");
ABSL_FLAG(std::string, trace_steps, "spans",
          "Per-step tracing of sampled requests: spans (a draft and a verify span per step), "
          "events (step events on one decode span per sequence) or off");

ABSL_FLAG(std::string, http_listen, "",
          "Also serve the OpenAI-compatible HTTP API on HOST:PORT (/v1/completions, "
          "/v1/chat/completions, /v1/models, /health); empty: off");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions (default: the --tokenizer "
          "directory's chat_template.jinja or tokenizer_config.json chat_template)");
ABSL_FLAG(int32_t, http_threads, 32,
          "HTTP connections served at once (a streamed request holds one)");
ABSL_FLAG(std::string, public_client_certs, "require",
          "With --tls_ca: require (clients of the Generation port must present a certificate "
          "signed by --tls_ca) or optional (they may present none, e.g. end users with bearer "
          "tokens; one they present is still verified)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens, one per line ('#' comments): gRPC Generation calls and HTTP "
          "/v1 requests must send one (authorization: Bearer TOKEN); re-read within a second of a "
          "change; empty: no authentication");

namespace treespec {
namespace {

int Main() {
  const TlsFiles tls = GetServiceFlags().tls;
  StepTracing step_tracing;
  if (!ParseStepTracing(absl::GetFlag(FLAGS_trace_steps), &step_tracing)) {
    return FailService(absl::InvalidArgumentError(absl::StrCat(
        "--trace_steps: '", absl::GetFlag(FLAGS_trace_steps), "' is not spans, events or off")));
  }
  const std::string client_certs = absl::GetFlag(FLAGS_public_client_certs);
  if (client_certs != "require" && client_certs != "optional") {
    return FailService(absl::InvalidArgumentError(absl::StrCat(
        "--public_client_certs: '", client_certs, "' is not require or optional")));
  }
  std::unique_ptr<BearerAuth> auth;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    auto created = BearerAuth::Create({.token_file = absl::GetFlag(FLAGS_auth_token_file)});
    if (!created.ok()) return FailService(created.status());
    auth = std::move(*created);
  }
  auto obs = StartServiceObservability("treespec-coordinator");
  if (!obs.ok()) return FailService(obs.status());
  CoordinatorTelemetry telemetry((*obs)->registry(), (*obs)->tracer(), step_tracing);
  std::vector<std::unique_ptr<WorkerClient>> workers;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipEmpty())) {
    absl::Status st = CheckHostPort("--workers", std::string(w));
    if (!st.ok()) return FailService(st);
    workers.push_back(MakeGrpcWorkerClient(std::string(w), tls));
  }
  std::vector<DrafterSpec> drafters;
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_drafters), ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(d, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return FailService(
          absl::InvalidArgumentError(absl::StrCat("--drafters: '", d, "' is not NAME=ADDR")));
    }
    if (absl::Status st = CheckHostPort("--drafters", kv[1]); !st.ok()) return FailService(st);
    drafters.push_back({kv[0], MakeGrpcDrafterClient(kv[1], tls)});
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    auto tok = LoadTokenizer(absl::GetFlag(FLAGS_tokenizer));
    if (!tok.ok()) return FailService(tok.status());
    tokenizer = std::move(*tok);
  }
  CoordinatorOptions options;
  options.default_drafter = absl::GetFlag(FLAGS_default_drafter);
  options.default_tree = absl::GetFlag(FLAGS_default_tree);
  options.bandit_trees = absl::GetFlag(FLAGS_bandit_trees);
  options.max_queue = absl::GetFlag(FLAGS_max_queue);
  options.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.max_tree_nodes = absl::GetFlag(FLAGS_max_tree_nodes);
  options.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  options.startup_timeout = std::chrono::seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  options.lane.draft_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_draft_timeout_ms));
  options.lane.verify_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_verify_timeout_ms));
  options.lane.draft_ahead = absl::GetFlag(FLAGS_draft_ahead);
  options.lane.draft_ahead_sampled = absl::GetFlag(FLAGS_draft_ahead_sampled);
  options.telemetry = &telemetry;
  auto coordinator = Coordinator::Create(options, std::move(workers), std::move(drafters),
                                         std::move(tokenizer));
  if (!coordinator.ok()) return FailService(coordinator.status());
  if (absl::Status st = (*coordinator)->Start(); !st.ok()) return FailService(st);
  GenerationService service(coordinator->get(), auth.get());
  // Generate makes its own `generate` span (coordinator/generate_telemetry.h).
  auto server = StartServiceServer({&service}, obs->get(), {"/treespec.v1.Generation/Generate"},
                                   absl::GetFlag(FLAGS_public_client_certs) == "require");
  if (!server.ok()) return FailService(server.status());
  telemetry.RegisterGauges(coordinator->get());
  CoordinatorHttpBackend http_backend(coordinator->get());
  std::unique_ptr<HttpServer> http;
  if (!absl::GetFlag(FLAGS_http_listen).empty()) {
    auto options = HttpOptionsFromFiles(absl::GetFlag(FLAGS_http_listen), absl::GetFlag(FLAGS_tokenizer),
                                        absl::GetFlag(FLAGS_chat_template));
    if (!options.ok()) return FailService(options.status());
    options->auth = auth.get();
    options->num_threads = absl::GetFlag(FLAGS_http_threads);
    auto started = HttpServer::Start(&http_backend, std::move(*options));
    if (!started.ok()) return FailService(started.status());
    http = std::move(*started);
    // The bound port, so that --http-listen HOST:0 tells its clients where it is.
    const std::string listen = absl::GetFlag(FLAGS_http_listen);
    std::printf("OpenAI HTTP API on %s:%d\n", listen.substr(0, listen.rfind(':')).c_str(),
                http->port());
    std::fflush(stdout);
  }
  // After the drain, traces are flushed and the metrics endpoint stops before
  // the coordinator its gauges read goes away.
  // Requests still queued or streaming when the grace ends get UNAVAILABLE
  // "server shutting down" rather than a cancelled call.
  Coordinator* c = coordinator->get();
  return ServeUntilSignal(&*server, obs->get(), [c] { c->Shutdown(); }, [c] { c->Shutdown(); });
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::InitServiceMain(
      argc, argv,
      "Public endpoint: drafts, verifies and streams completions.\n"
      "Usage: treespec-coordinator --listen HOST:PORT --workers ADDR[,ADDR...] "
      "[--drafters NAME=ADDR[,...]] [--tokenizer DIR]");
  return treespec::Main();
}
