// treespec-drafter: serves one drafter (a mamba or transformer model, an
// EAGLE / EAGLE-3 or ReDrafter head of a target, or the model-free ngram
// drafter) over gRPC.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/tensor/backend.h"
#include "core/tensor/dtype.h"
#include "core/util/status_macros.h"
#include "core/util/periodic.h"
#include "drafter_service/draft_profiler.h"
#include "drafter_service/drafter.h"
#include "drafter_service/drafter_service.h"
#include "drafter_service/drafter_telemetry.h"
#include "rpc/cost_profile.h"
#include "rpc/service_main.h"

ABSL_FLAG(std::string, kind, "mamba",
          "Drafter kind: mamba or transformer (must match --model), or ngram (suffix matching over "
          "each sequence's own tokens; no model, any target of its vocabulary), or eagle / eagle3 "
          "(a head reading the target's features; --model the head, --target the target), or redrafter "
          "(a recurrent head with beam search over the target's last hidden state; --model the head, "
          "--target the target)");
ABSL_FLAG(std::string, model, "",
          "Hugging Face model directory of the drafter, or a llama-family .gguf file; ngram: "
          "optional, a model (e.g. the target) whose vocabulary size to use");
ABSL_FLAG(std::string, target, "",
          "eagle, eagle3, redrafter: the target's model directory (the head reads its embedding and LM "
          "head; the worker must serve the same target)");
ABSL_FLAG(int64_t, vocab_size, 0, "ngram: vocabulary size of the target (0: from --model)");
ABSL_FLAG(int32_t, ngram_min, 1, "ngram: shortest suffix match that proposes children");
ABSL_FLAG(int32_t, ngram_max, 8, "ngram: longest suffix matched");
ABSL_FLAG(int32_t, beam_width, 3,
          "redrafter: most beam-search candidates per draft (each request's tree shape caps it: "
          "width <= shape nodes / length)");
ABSL_FLAG(int32_t, beam_length, 4,
          "redrafter: beam-search draft length (capped by each request's tree depth)");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");
ABSL_FLAG(int64_t, max_sequences, 64, "Most concurrently open sequences");
ABSL_FLAG(int64_t, max_tree_nodes, 64, "Largest tree per sequence (root included)");
ABSL_FLAG(int64_t, max_context, 4096, "transformer: longest sequence in the drafter's KV cache");
ABSL_FLAG(int32_t, top_k, 32, "Default support size of the draft distribution q");
ABSL_FLAG(bool, graphs, true, "Use CUDA graphs for batched steps (cuda only)");
ABSL_FLAG(int64_t, prefill_chunk_tokens, 32,
          "Longest prompt piece an Open feeds at once; Draft calls go between pieces, so a "
          "long prompt never stalls live streams");
ABSL_FLAG(int32_t, predraft, -1,
          "Outcomes per sequence whose next tree is drafted while the last one is verified "
          "(speculative speculative decoding); 0: off; -1: 2 with --draft_ahead=1 and 0 "
          "otherwise. Off by default because a drafter that shares its hardware with the worker "
          "slows every Verify when it drafts beside it (on the 2-core CPU demo machine turning "
          "it off took the demo pair from 1.51x to 1.76x plain at concurrency 1, "
          "docs/cpu/spec_bench_predraft_2026-11-26.txt; on an H200, "
          "docs/gpu/spec_bench_h200_2026-11-26.txt); set it when the drafter has hardware of "
          "its own");
ABSL_FLAG(bool, predraft_sampled, false,
          "Also pre-draft after sampled drafts (temperature > 0; their bonus token is rarely "
          "guessed)");
ABSL_FLAG(int64_t, predraft_max_batch, -1,
          "Draft calls of more sequences than this start no pre-drafting (0: any size; -1: 4 on "
          "cpu devices, where pre-drafting competes with the worker for cores, 0 otherwise)");
ABSL_FLAG(int32_t, draft_ahead, 0,
          "1: answer the coordinator's draft-ahead requests (the next step's trees for the "
          "--predraft most likely outcomes, asked beside each Verify, so that a matching "
          "outcome needs no Draft call); 0: coordinators send none. Off by default: drafting "
          "during the Verify takes the worker's cores on a CPU (docs/operations.md) and its "
          "GPU when the two share one (0.14x plain on an H200, docs/gpu/"
          "spec_bench_h200_2026-11-26.txt); it pays only on a drafter with hardware of its own");
ABSL_FLAG(double, sequence_lease_s, 60,
          "Seconds after its last Open/Draft that a sequence is released (its client is presumed "
          "gone); 0: never");
ABSL_FLAG(int32_t, debug_draft_delay_ms, 0,
          "TEST ONLY: every Draft call sleeps this long before drafting (fault injection: a "
          "drafter slower than the coordinator's --draft_timeout_ms); 0: off. Never set it in "
          "production");
ABSL_FLAG(bool, startup_profile, true,
          "Profile the Draft call at start-up (or read the cached profile) and report it to the "
          "coordinator, so that auto trees are planned with the right costs from the first step");
ABSL_FLAG(std::string, cost_cache_dir, "",
          "Directory of cached start-up profiles, keyed by model, device and dtype (empty: "
          "$TREESPEC_CACHE_DIR, $XDG_CACHE_HOME/treespec or ~/.cache/treespec; 'none': no cache)");

namespace treespec {
namespace {

// The Draft call's cost profile, from the cache or measured now. Never
// fatal: without one the coordinator learns the costs online.
v1::DraftCostProfile StartupProfile(Drafter* drafter, const DrafterOptions& options,
                                    Backend* backend) {
  v1::DraftCostProfile out;
  if (!absl::GetFlag(FLAGS_startup_profile)) return out;
  std::string dir = absl::GetFlag(FLAGS_cost_cache_dir);
  if (dir.empty()) dir = DefaultCostCacheDir();
  if (dir == "none") dir.clear();
  const std::string model_key =
      options.kind == "ngram"
          ? absl::StrCat("draft ngram vocab ", drafter->vocab_size(), " n ", options.ngram_min,
                         "-", options.ngram_max)
          : absl::StrCat("draft ", options.kind, " ", ModelIdentity(options.model_dir),
                         options.kind == "redrafter"
                             ? absl::StrCat(" beam ", options.beam_width, "x", options.beam_length)
                             : std::string());
  const std::string device_key =
      absl::StrCat(absl::GetFlag(FLAGS_device), " ", backend->name(), " ",
                   DTypeName(backend->activation_dtype()), " threads ",
                   std::thread::hardware_concurrency(), " build ", EngineBuildId().substr(0, 16));
  auto measure = [&]() -> absl::StatusOr<StepCostModel> {
    StepCostModel m;
    TS_ASSIGN_OR_RETURN(m.draft, MeasureDraftCost(drafter, options.max_sequences,
                                                  options.max_tree_nodes, DraftProfileOptions()));
    return m;
  };
  absl::StatusOr<LoadedProfile> p =
      LoadOrMeasureProfile(dir, model_key, device_key, measure, std::cerr);
  if (!p.ok()) {
    std::cerr << "treespec-drafter: warning: no draft cost profile: " << p.status().message()
              << std::endl;
    return out;
  }
  ToProto(*p, &out);
  std::cerr << "treespec-drafter: draft cost profile ("
            << (p->source == v1::COST_PROFILE_SOURCE_CACHE
                    ? std::string("cached")
                    : absl::StrCat("measured in ", p->profile_ns / 1000000, " ms"))
            << "): call " << out.per_call_s() * 1e3 << " ms + " << out.per_level_s() * 1e3
            << " ms/level + " << out.per_sequence_level_s() * 1e3 << " ms/sequence-level + "
            << out.per_node_s() * 1e3 << " ms/node" << std::endl;
  return out;
}

int Main() {
  DrafterOptions options;
  options.kind = absl::GetFlag(FLAGS_kind);
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.target_dir = absl::GetFlag(FLAGS_target);
  options.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  options.ngram_min = absl::GetFlag(FLAGS_ngram_min);
  options.ngram_max = absl::GetFlag(FLAGS_ngram_max);
  options.beam_width = absl::GetFlag(FLAGS_beam_width);
  options.beam_length = absl::GetFlag(FLAGS_beam_length);
  options.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  options.max_tree_nodes = absl::GetFlag(FLAGS_max_tree_nodes);
  options.max_context = absl::GetFlag(FLAGS_max_context);
  options.default_top_k = absl::GetFlag(FLAGS_top_k);
  options.use_graphs = absl::GetFlag(FLAGS_graphs);
  options.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  const bool on_cpu = absl::StartsWith(absl::GetFlag(FLAGS_device), "cpu");
  options.draft_ahead = absl::GetFlag(FLAGS_draft_ahead) > 0;
  options.predraft = absl::GetFlag(FLAGS_predraft);
  if (options.predraft < 0) options.predraft = options.draft_ahead ? 2 : 0;
  options.predraft_sampled = absl::GetFlag(FLAGS_predraft_sampled);
  options.predraft_max_batch = absl::GetFlag(FLAGS_predraft_max_batch);
  if (options.predraft_max_batch < 0) {
    options.predraft_max_batch = on_cpu ? 4 : 0;
  }
  options.sequence_lease = absl::Seconds(absl::GetFlag(FLAGS_sequence_lease_s));
  if (absl::Status st = options.Validate(); !st.ok()) return FailService(st);
  if (absl::GetFlag(FLAGS_debug_draft_delay_ms) < 0) {
    return FailService(absl::InvalidArgumentError(absl::StrCat(
        "--debug_draft_delay_ms: ", absl::GetFlag(FLAGS_debug_draft_delay_ms), " is negative")));
  }
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return FailService(backend.status());
  auto drafter = CreateDrafter(options, backend->get());
  if (!drafter.ok()) return FailService(drafter.status());
  std::unique_ptr<Periodic> sweeper;
  if (options.sequence_lease > absl::ZeroDuration()) {
    Drafter* d = drafter->get();
    sweeper = std::make_unique<Periodic>(
        std::min(absl::Seconds(1), options.sequence_lease / 4), [d] {
          if (int n = d->ReleaseExpired(); n > 0) {
            std::fprintf(stderr, "treespec-drafter: released %d sequences whose lease expired\n", n);
          }
        });
  }
  const std::string& dir = options.model_dir;
  DrafterService service(drafter->get(),
                         dir.empty() ? std::string("ngram") : dir.substr(dir.find_last_of('/') + 1));
  v1::DraftCostProfile profile = StartupProfile(drafter->get(), options, backend->get());
  service.SetStartupProfile(std::move(profile), (*drafter)->Stats());
  if (absl::GetFlag(FLAGS_debug_draft_delay_ms) > 0) {
    std::cerr << "treespec-drafter: warning: --debug_draft_delay_ms "
              << absl::GetFlag(FLAGS_debug_draft_delay_ms)
              << " (test only): every Draft call is delayed" << std::endl;
    service.SetDebugDraftDelay(std::chrono::milliseconds(absl::GetFlag(FLAGS_debug_draft_delay_ms)));
  }
  auto obs = StartServiceObservability("treespec-drafter");
  if (!obs.ok()) return FailService(obs.status());
  RegisterDrafterTelemetry(&service, obs->get());
  auto server = StartServiceServer({&service}, obs->get());
  if (!server.ok()) return FailService(server.status());
  return ServeUntilSignal(&*server, obs->get());
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::InitServiceMain(
      argc, argv,
      "Serves a drafter model that proposes token trees.\n"
      "Usage: treespec-drafter --kind mamba|transformer --model DIR --listen HOST:PORT\n"
      "       treespec-drafter --kind eagle|eagle3 --model HEAD_DIR --target TARGET_DIR --listen HOST:PORT\n"
      "       treespec-drafter --kind redrafter --model HEAD_DIR --target TARGET_DIR --listen HOST:PORT\n"
      "                        [--beam-width 3 --beam-length 4]\n"
      "       treespec-drafter --kind ngram (--vocab-size N | --model DIR|FILE.gguf) --listen HOST:PORT");
  return treespec::Main();
}
