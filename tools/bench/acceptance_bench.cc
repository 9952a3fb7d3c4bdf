// acceptance_bench: mean accepted length τ (tokens committed per target step:
// accepted drafts + the bonus token) of each drafter against a target, on a
// file of held-out prompts, for several tree shapes, greedy and sampled. Runs
// the worker and drafter cores in process (TargetRunner + Drafter), so it
// measures the algorithm, not the RPCs.
//
//   build/bin/acceptance_bench [--target models/demo/target]
//     [--drafters mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,
//                 eagle=models/demo/eagle-head,eagle3=models/demo/eagle3-head,
//                 redrafter=models/demo/redrafter-head]
//     (NAME:KIND=DIR labels a row NAME, e.g. two drafters of one kind:
//     hybrid-mamba:mamba=models/demo/hybrid-mamba-drafter,mamba=models/demo/mamba-drafter)
//     [--beam_width 3 --beam_length 4] (redrafter's beam, fitted to each tree shape)
//     [--prompts models/demo/heldout_prompts.txt] [--trees "chain:4;3,2,2,1,1;3,3,2,1"]
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "core/model/sequence_model.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/cli_args.h"
#include "drafter_service/drafter.h"
#include "worker/target_runner.h"

ABSL_FLAG(std::string, target, "models/demo/target", "Target model directory");
ABSL_FLAG(std::string, drafters, "mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,"
          "eagle=models/demo/eagle-head,eagle3=models/demo/eagle3-head,"
          "redrafter=models/demo/redrafter-head",
          "[NAME:]KIND=DIR[,...] (NAME, the row's label, defaults to KIND)");
ABSL_FLAG(int32_t, beam_width, 3, "redrafter: beam width (drafter --beam_width)");
ABSL_FLAG(int32_t, beam_length, 4, "redrafter: beam length (drafter --beam_length)");
ABSL_FLAG(std::string, prompts, "models/demo/heldout_prompts.txt", "One prompt per line");
ABSL_FLAG(int32_t, num_prompts, 50, "Prompts used (from the top of the file)");
ABSL_FLAG(std::string, trees, "chain:4;3,2,2,1,1;3,3,2,1", "';'-separated tree shapes");
ABSL_FLAG(int32_t, max_tokens, 128, "New tokens per prompt");
ABSL_FLAG(std::string, temperatures, "0,1", "Temperatures (0 greedy; > 0 multi-round verification)");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");
ABSL_FLAG(bool, markdown, false, "Print a Markdown table");
ABSL_FLAG(int32_t, top_k, 32, "Support of the draft distribution q when sampling (drafter --top_k)");

namespace treespec {
namespace {

struct Result {
  int64_t steps = 0, committed = 0, drafted = 0, accepted = 0;
};

// Generates max_tokens for each prompt, speculatively, and counts.
absl::StatusOr<Result> Measure(TargetRunner* runner, Drafter* drafter,
                               const std::vector<std::vector<int32_t>>& prompts,
                               const TreeShape& shape, float temperature, int max_tokens,
                               uint64_t* next_id) {
  Result res;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const uint64_t id = (*next_id)++;
    OpenSpec open;
    open.id = id;
    open.prompt = prompts[p];
    open.sampling.temperature = temperature;
    open.seed = 1000 + p;
    open.max_total_tokens = static_cast<int64_t>(prompts[p].size()) + max_tokens;
    open.feature_layers = drafter->feature_layers();
    OpenOutcome o = runner->Open({open})[0];
    if (!o.status.ok()) return o.status;
    // EAGLE heads: the prompt's features but the last, which goes with the
    // first draft (drafter.h); then each verification's.
    const size_t W = o.features.size() / prompts[p].size();
    std::vector<float> features(o.features.end() - W, o.features.end());
    o.features.resize(o.features.size() - W);
    std::vector<absl::Status> ds = drafter->Open({{id, prompts[p], std::move(o.features)}});
    if (!ds[0].ok()) return ds[0];
    std::vector<int32_t> undrafted = {o.first_token};
    int32_t pending = o.first_token;
    int generated = 1;
    for (uint64_t step = 1; generated < max_tokens; ++step) {
      DraftSpec d;
      d.id = id;
      d.step = step;
      d.new_tokens = undrafted;
      d.shape = shape;
      d.temperature = temperature;
      d.seed = 7000 + p;
      d.features = std::move(features);
      DraftOutcome dout = drafter->Draft({d})[0];
      if (!dout.status.ok()) return dout.status;
      StepSpec s;
      s.id = id;
      s.step = step;
      s.tree = dout.tree;
      if (s.tree.tokens[0] != pending) return absl::InternalError("drafter root mismatch");
      StepOutcome out = runner->Verify({s}, nullptr)[0];
      if (!out.status.ok()) return out.status;
      res.steps += 1;
      res.committed += static_cast<int64_t>(out.tokens.size());
      res.drafted += dout.tree.num_nodes() - 1;
      res.accepted += out.num_accepted;
      generated += static_cast<int>(out.tokens.size());
      undrafted = out.tokens;
      features = std::move(out.features);
      pending = out.tokens.back();
      if (static_cast<int64_t>(prompts[p].size()) + generated + shape.NumNodes() >=
          open.max_total_tokens) {
        break;
      }
    }
    runner->Release({id});
    drafter->Release({id});
  }
  return res;
}

int Main() {
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  SequenceModelOptions mo;
  mo.kv_blocks = 512;
  auto model = LoadSequenceModel(target, backend->get(), nullptr, mo);
  auto tok = LoadTokenizer(target);
  if (!model.ok() || !tok.ok()) {
    std::fprintf(stderr, "target: %s %s\n", model.status().ToString().c_str(),
                 tok.status().ToString().c_str());
    return 1;
  }
  TargetRunnerOptions ro;
  ro.max_context = 1024;
  TargetRunner runner(model->get(), ro);
  std::vector<std::vector<int32_t>> prompts;
  std::ifstream in(absl::GetFlag(FLAGS_prompts));
  std::string line;
  while (std::getline(in, line) && static_cast<int>(prompts.size()) < absl::GetFlag(FLAGS_num_prompts)) {
    if (line.empty()) continue;
    auto ids = (*tok)->Encode(line, true);
    if (ids.ok() && !ids->empty()) prompts.push_back(*ids);
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "no prompts in %s\n", absl::GetFlag(FLAGS_prompts).c_str());
    return 1;
  }
  std::vector<TreeShape> shapes;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_trees), ';', absl::SkipEmpty())) {
    auto s = TreeShape::Parse(t);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    shapes.push_back(*s);
  }
  std::vector<float> temps;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_temperatures), ',')) {
    temps.push_back(std::stof(std::string(t)));
  }
  const bool md = absl::GetFlag(FLAGS_markdown);
  std::printf(md ? "\n| drafter | tree | temperature | verification | τ (tokens/step) | accepted/drafted |\n|---|---|---|---|---|---|\n"
                 : "\n%-12s %-11s %5s %-11s %8s %10s\n",
              "drafter", "tree", "T", "verify", "tau", "acc/draft");
  uint64_t next_id = 1;
  for (absl::string_view kd : absl::StrSplit(absl::GetFlag(FLAGS_drafters), ',', absl::SkipEmpty())) {
    std::vector<std::string> p = absl::StrSplit(kd, absl::MaxSplits('=', 1));
    std::vector<std::string> nk = absl::StrSplit(p[0], absl::MaxSplits(':', 1));
    if (nk.size() == 2) p[0] = nk[1];
    const std::string name = nk[0];
    DrafterOptions dopt;
    dopt.kind = p[0];
    dopt.model_dir = p[1];
    dopt.target_dir = target;  // eagle kinds, redrafter read the target's embedding and LM head
    dopt.beam_width = absl::GetFlag(FLAGS_beam_width);
    dopt.beam_length = absl::GetFlag(FLAGS_beam_length);
    dopt.max_sequences = 2;
    dopt.default_top_k = absl::GetFlag(FLAGS_top_k);
    auto drafter = CreateDrafter(dopt, backend->get());
    if (!drafter.ok()) {
      std::fprintf(stderr, "drafter %s: %s\n", p[0].c_str(), drafter.status().ToString().c_str());
      return 1;
    }
    for (float t : temps) {
      for (const TreeShape& shape : shapes) {
        auto r = Measure(&runner, drafter->get(), prompts, shape, t, absl::GetFlag(FLAGS_max_tokens),
                         &next_id);
        if (!r.ok()) {
          std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
          return 1;
        }
        const double tau = static_cast<double>(r->committed) / r->steps;
        const char* mode = t > 0 ? "multiround" : "greedy";
        if (md) {
          std::printf("| %s | %s | %.1f | %s | %.2f | %.3f |\n", name.c_str(),
                      shape.ToString().c_str(), t, mode, tau,
                      static_cast<double>(r->accepted) / std::max<int64_t>(1, r->drafted));
        } else {
          std::printf("%-12s %-11s %5.1f %-11s %8.2f %10.3f\n", name.c_str(),
                      shape.ToString().c_str(), t, mode, tau,
                      static_cast<double>(r->accepted) / std::max<int64_t>(1, r->drafted));
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n%zu prompts, %d new tokens each\n", prompts.size(), absl::GetFlag(FLAGS_max_tokens));
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
