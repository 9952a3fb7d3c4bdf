// treespec-loadgen: load-tests a coordinator and reports TTFT, TPOT, ITL and
// end-to-end latency percentiles, throughput, goodput against SLOs, errors
// by code and the mean accepted length (tools/loadgen/stats.h states the
// timing conventions).
#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/util/cli_args.h"
#include "rpc/bearer_auth.h"
#include "rpc/server.h"
#include "tools/loadgen/runner.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Coordinator address HOST:PORT");
ABSL_FLAG(int32_t, concurrency, 0, "Closed loop: this many clients, each one request at a time");
ABSL_FLAG(double, rate, 0, "Open loop: Poisson arrivals at this many requests per second");
ABSL_FLAG(int64_t, num_requests, 100, "Requests to send in all (with --duration_s: at most)");
ABSL_FLAG(double, duration_s, 0,
          "Closed loop: start no new request after this many seconds (in-flight ones finish); "
          "0: run --num_requests");
ABSL_FLAG(int64_t, cancel_every, 0,
          "Cancel every Nth request right after its first token (client-side cancellation; not "
          "counted as an error); 0: none");
ABSL_FLAG(std::string, prompts, "",
          "JSONL workload (prompt or token_ids, max_tokens, temperature, drafter, tree, ...); "
          "empty: a built-in set of text prompts");
ABSL_FLAG(std::string, json, "", "Write the summary and per-request results as JSON here");
ABSL_FLAG(int32_t, max_tokens, 128, "max_tokens of requests whose line gives none");
ABSL_FLAG(double, temperature, 0.0, "Temperature of requests whose line gives none");
ABSL_FLAG(std::string, drafter, "", "Drafter of requests whose line gives none (empty: server default)");
ABSL_FLAG(std::string, tree, "", "Tree shape of requests whose line gives none (empty: server default)");
ABSL_FLAG(bool, ignore_eos, false, "Ask for exactly max_tokens tokens (requests whose line gives none)");
ABSL_FLAG(double, slo_ttft_ms, 0, "Goodput SLO on time to first token (0: none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "Goodput SLO on time per output token (0: none)");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the arrival process and of requests without one");
ABSL_FLAG(double, timeout_s, 600, "Deadline of each request");
ABSL_FLAG(double, progress_interval_s, 1.0, "Progress line period on stderr (0: quiet)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle (enables TLS to the server)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for a coordinator that requires one (with --tls_ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens (one per line, '#' comments); the first is sent");

namespace treespec::loadgen {
namespace {

int Main() {
  LoadOptions options;
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.num_requests = absl::GetFlag(FLAGS_num_requests);
  options.duration_s = absl::GetFlag(FLAGS_duration_s);
  options.cancel_every = absl::GetFlag(FLAGS_cancel_every);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  options.progress_interval_s = absl::GetFlag(FLAGS_progress_interval_s);
  if (absl::Status st = options.Validate(); !st.ok()) {
    std::cerr << "treespec-loadgen: " << st.message() << std::endl;
    return 2;
  }
  if (absl::Status st = CheckHostPort("--server", absl::GetFlag(FLAGS_server)); !st.ok()) {
    std::cerr << "treespec-loadgen: " << st.message() << std::endl;
    return 2;
  }
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    auto authorization =
        ClientAuthorization("--auth_token_file", absl::GetFlag(FLAGS_auth_token_file));
    if (!authorization.ok()) {
      std::cerr << "treespec-loadgen: " << authorization.status().message() << std::endl;
      return 2;
    }
    options.authorization = *authorization;
  }
  RequestDefaults defaults;
  defaults.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  defaults.temperature = absl::GetFlag(FLAGS_temperature);
  defaults.drafter = absl::GetFlag(FLAGS_drafter);
  defaults.tree = absl::GetFlag(FLAGS_tree);
  defaults.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  defaults.seed = absl::GetFlag(FLAGS_seed);
  std::vector<v1::GenerateRequest> workload;
  if (absl::GetFlag(FLAGS_prompts).empty()) {
    workload = BuiltinPrompts(defaults);
  } else {
    auto loaded = LoadPromptsJsonl(absl::GetFlag(FLAGS_prompts), defaults);
    if (!loaded.ok()) {
      std::cerr << "treespec-loadgen: " << loaded.status().message() << std::endl;
      return 2;
    }
    workload = std::move(*loaded);
  }
  TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  auto stub = v1::Generation::NewStub(MakeChannel(absl::GetFlag(FLAGS_server), tls));
  const std::string mode =
      options.concurrency > 0 ? absl::StrCat("closed loop, concurrency ", options.concurrency)
                              : absl::StrCat("open loop, Poisson rate ", options.rate, " req/s");
  std::fprintf(stderr, "treespec-loadgen: %lld requests to %s (%s), %zu distinct prompts\n",
               static_cast<long long>(options.num_requests), absl::GetFlag(FLAGS_server).c_str(),
               mode.c_str(), workload.size());
  auto run = RunLoad(stub.get(), workload, options);
  if (!run.ok()) {
    std::cerr << "treespec-loadgen: " << run.status().message() << std::endl;
    return 2;
  }
  Slo slo{absl::GetFlag(FLAGS_slo_ttft_ms), absl::GetFlag(FLAGS_slo_tpot_ms)};
  Summary summary = Summarize(run->results, run->duration_s, slo);
  std::printf("treespec-loadgen: %s, %s\n%s", absl::GetFlag(FLAGS_server).c_str(), mode.c_str(),
              FormatTable(summary).c_str());
  if (!absl::GetFlag(FLAGS_json).empty()) {
    nlohmann::json j;
    j["config"] = {{"server", absl::GetFlag(FLAGS_server)},
                   {"concurrency", options.concurrency},
                   {"rate", options.rate},
                   {"num_requests", options.num_requests},
                   {"duration_s", options.duration_s},
                   {"cancel_every", options.cancel_every},
                   {"prompts", absl::GetFlag(FLAGS_prompts)},
                   {"slo_ttft_ms", slo.ttft_ms},
                   {"slo_tpot_ms", slo.tpot_ms},
                   {"itl_convention",
                    "per token: a chunk of k tokens adds one gap and k-1 zero gaps"}};
    j["summary"] = ToJson(summary);
    nlohmann::json reqs = nlohmann::json::array();
    for (const RequestResult& r : run->results) {
      reqs.push_back({{"ok", r.ok},
                      {"client_cancelled", r.client_cancelled},
                      {"code", r.code},
                      {"scheduled_s", r.scheduled_s},
                      {"start_s", r.start_s},
                      {"ttft_ms", r.ttft_s >= 0 ? r.ttft_s * 1e3 : -1.0},
                      {"tpot_ms", r.tpot_s >= 0 ? r.tpot_s * 1e3 : -1.0},
                      {"e2e_ms", r.e2e_s * 1e3},
                      {"output_tokens", r.output_tokens},
                      {"prompt_tokens", r.prompt_tokens},
                      {"steps", r.steps},
                      {"drafted_tokens", r.drafted_tokens},
                      {"accepted_tokens", r.accepted_tokens},
                      {"slo_met", MeetsSlo(r, slo)}});
    }
    j["requests"] = std::move(reqs);
    std::ofstream out(absl::GetFlag(FLAGS_json));
    out << j.dump(2) << "\n";
    if (!out) {
      std::cerr << "treespec-loadgen: cannot write --json '" << absl::GetFlag(FLAGS_json) << "'"
                << std::endl;
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace treespec::loadgen

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Load generator for a treespec coordinator.\n"
      "Usage: treespec-loadgen --server ADDR (--concurrency C | --rate R) --num-requests N "
      "[--prompts FILE.jsonl] [--json OUT] [--slo-ttft-ms MS --slo-tpot-ms MS]");
  treespec::ParseFlags(argc, argv);
  return treespec::loadgen::Main();
}
