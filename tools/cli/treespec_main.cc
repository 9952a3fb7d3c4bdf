// treespec: command-line client of a coordinator.
//   treespec generate --server ADDR --prompt TEXT [--max-tokens N --temperature T
//       --top-p P --top-k K --seed S --drafter NAME|none --tree SHAPE
//       --verify greedy|multiround|target_sampling --json]
//   treespec info --server ADDR
// Both take --auth_token_file FILE (the first token is sent as
// "authorization: Bearer TOKEN") and --tls_ca [--tls_cert --tls_key].
#include <cstdio>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/cli_args.h"
#include "nlohmann/json.hpp"
#include "rpc/bearer_auth.h"
#include "rpc/server.h"
#include "rpc/status_convert.h"
#include "treespec/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Coordinator address HOST:PORT");
ABSL_FLAG(std::string, prompt, "", "Prompt text");
ABSL_FLAG(std::string, ids, "", "Prompt as comma-separated token ids (instead of --prompt)");
ABSL_FLAG(int32_t, max_tokens, 128, "New tokens at most");
ABSL_FLAG(double, temperature, 0.0, "0: greedy");
ABSL_FLAG(double, top_p, 1.0, "Nucleus mass in (0, 1]");
ABSL_FLAG(int32_t, top_k, 0, "Top-k (0: off)");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Sampling seed (unset: the server draws one and reports it)");
ABSL_FLAG(std::string, drafter, "auto", "Drafter name, auto or none");
ABSL_FLAG(std::string, tree, "", "Tree shape N1,N2,... or chain:K or auto (empty: server default)");
ABSL_FLAG(std::string, verify, "", "greedy, multiround or target_sampling (empty: by temperature)");
ABSL_FLAG(std::string, stop, "", "Stop string (may be given once)");
ABSL_FLAG(bool, json, false, "Print one JSON object with the text and final statistics");
ABSL_FLAG(int32_t, timeout_s, 600, "Deadline of the call");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle (enables TLS)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for a coordinator that requires one (with --tls_ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens (one per line, '#' comments); the first is sent");

namespace treespec {
namespace {

int Usage() {
  std::fputs("usage: treespec generate --server ADDR --prompt TEXT [flags]\n"
             "       treespec info --server ADDR\n(see --help)\n", stderr);
  return 2;
}

// "treespec: UNAVAILABLE: failed to connect ..." on stderr: the code by name.
// Returns `exit_code`: 2 for a bad command line, 1 for a failed call.
int Fail(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "treespec: %s\n", status.ToString().c_str());
  return exit_code;
}
int Fail(const grpc::Status& status) { return Fail(FromGrpc(status), 1); }

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_STOP_STRING: return "stop_string";
    default: return "";
  }
}

// `authorization`: "Bearer TOKEN" from --auth_token_file; empty: none sent.
void Authorize(grpc::ClientContext* ctx, const std::string& authorization) {
  if (!authorization.empty()) ctx->AddMetadata("authorization", authorization);
}

int Info(v1::Generation::Stub* stub, const std::string& authorization) {
  grpc::ClientContext ctx;
  Authorize(&ctx, authorization);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ModelInfo info;
  grpc::Status st = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!st.ok()) return Fail(st);
  std::printf("%s", info.DebugString().c_str());
  return 0;
}

// The request the flags describe; INVALID_ARGUMENT naming a bad flag.
absl::StatusOr<v1::GenerateRequest> RequestFromFlags() {
  v1::GenerateRequest req;
  if (FlagGiven("ids")) {
    const std::string text = absl::GetFlag(FLAGS_ids);
    for (absl::string_view p : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
      int32_t v;
      if (!absl::SimpleAtoi(p, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--ids: '", p, "' is not an integer"));
      }
      req.mutable_token_ids()->add_ids(v);
    }
    if (req.token_ids().ids().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--ids: no token ids in '", text, "'"));
    }
  } else {
    req.set_text(absl::GetFlag(FLAGS_prompt));
  }
  req.set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  s->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed).has_value()) s->set_seed(*absl::GetFlag(FLAGS_seed));
  if (!absl::GetFlag(FLAGS_stop).empty()) req.add_stop(absl::GetFlag(FLAGS_stop));
  v1::SpeculationOptions* sp = req.mutable_speculation();
  sp->set_drafter(absl::GetFlag(FLAGS_drafter));
  sp->set_tree(absl::GetFlag(FLAGS_tree));
  const std::string verify = absl::GetFlag(FLAGS_verify);
  if (verify == "greedy") {
    sp->set_verification(v1::VERIFICATION_MODE_GREEDY);
  } else if (verify == "multiround") {
    sp->set_verification(v1::VERIFICATION_MODE_MULTIROUND);
  } else if (verify == "target_sampling") {
    sp->set_verification(v1::VERIFICATION_MODE_TARGET_SAMPLING);
  } else if (!verify.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--verify: '", verify, "' is not greedy, multiround or target_sampling"));
  }
  return req;
}

// The final statistics of a finished stream: one JSON object on stdout with
// the text and ids, or a summary line on stderr.
void PrintSummary(const v1::GenerateResponse& last, const std::string& text,
                  const std::vector<int32_t>& ids, bool json) {
  const v1::SpeculationStats& spec = last.speculation();
  const double tok_s = last.timings().total_ns() > 0
                           ? last.usage().completion_tokens() * 1e9 / last.timings().total_ns()
                           : 0.0;
  if (json) {
    nlohmann::json j = {
        {"text", text},
        {"token_ids", ids},
        {"finish_reason", FinishName(last.finish_reason())},
        {"prompt_tokens", last.usage().prompt_tokens()},
        {"completion_tokens", last.usage().completion_tokens()},
        {"queue_ns", last.timings().queue_ns()},
        {"ttft_ns", last.timings().ttft_ns()},
        {"per_token_ns", last.timings().per_token_ns()},
        {"total_ns", last.timings().total_ns()},
        {"tokens_per_s", tok_s},
        {"drafter", spec.drafter()},
        {"tree", spec.tree()},
        {"steps", spec.steps()},
        {"drafted_tokens", spec.drafted_tokens()},
        {"accepted_tokens", spec.accepted_tokens()},
        {"mean_accepted_length", spec.mean_accepted_length()},
        {"fallback_steps", spec.fallback_steps()},
        {"drafter_errors", spec.drafter_errors()},
        {"seed", last.seed()},
    };
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("\n");
  std::fprintf(stderr,
               "[%s] %d tokens, %.1f tokens/s, drafter %s tree %s: %d steps, mean accepted "
               "length %.2f (%d/%d drafts accepted, %d fallback steps), seed %llu\n",
               FinishName(last.finish_reason()), last.usage().completion_tokens(), tok_s,
               spec.drafter().c_str(), spec.tree().c_str(), spec.steps(),
               spec.mean_accepted_length(), spec.accepted_tokens(), spec.drafted_tokens(),
               spec.fallback_steps(), static_cast<unsigned long long>(last.seed()));
}

int Generate(v1::Generation::Stub* stub, const std::string& authorization) {
  absl::StatusOr<v1::GenerateRequest> req = RequestFromFlags();
  if (!req.ok()) return Fail(req.status(), 2);
  const bool json = absl::GetFlag(FLAGS_json);
  grpc::ClientContext ctx;
  Authorize(&ctx, authorization);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  auto reader = stub->Generate(&ctx, *req);
  v1::GenerateResponse chunk, last;
  std::string text;
  std::vector<int32_t> ids;
  while (reader->Read(&chunk)) {
    text += chunk.text();
    ids.insert(ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    if (!json) {
      std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
      std::fflush(stdout);
    }
    if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = chunk;
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) {
    if (!json) std::printf("\n");
    return Fail(st);
  }
  PrintSummary(last, text, ids, json);
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Client of a treespec coordinator.\n"
      "Usage: treespec generate --server ADDR --prompt TEXT [--max-tokens N --temperature T "
      "--seed S --drafter NAME|none --tree SHAPE --verify MODE --json]\n"
      "       treespec info --server ADDR");
  std::vector<std::string> rest = treespec::ParseFlags(argc, argv);
  if (rest.size() != 2) return treespec::Usage();
  std::string authorization;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    auto read = treespec::ClientAuthorization("--auth_token_file",
                                              absl::GetFlag(FLAGS_auth_token_file));
    if (!read.ok()) return treespec::Fail(read.status(), 2);
    authorization = *read;
  }
  treespec::TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                         absl::GetFlag(FLAGS_tls_ca)};
  auto stub = treespec::v1::Generation::NewStub(
      treespec::MakeChannel(absl::GetFlag(FLAGS_server), tls));
  if (rest[1] == "generate") return treespec::Generate(stub.get(), authorization);
  if (rest[1] == "info") return treespec::Info(stub.get(), authorization);
  return treespec::Usage();
}
