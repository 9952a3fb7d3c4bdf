// predraft_bench: what pre-drafting (drafter --predraft, issue 11 point 5)
// buys. A loop that mimics the coordinator runs the demo target (TargetRunner,
// greedy) and a drafter in process: Draft(k) for a batch of sequences, verify
// on the target, then wait until the verify window (--verify_ms, emulating a
// remote target; at least the in-process verify) has passed, and Draft(k+1)
// with the real outcome. For each --predraft setting it prints the hit rate,
// the Draft latency the caller sees (median, p90, mean) and the time saved per
// step against --predraft 0. Trees are identical in every setting (a hit is
// the same draft, run earlier), so acceptance does not change.
//
//   build/bin/predraft_bench [--target models/demo/target]
//     [--drafters mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter]
//     [--tree 3,2,2,1] [--predraft 0,1,2,4] [--batch 4] [--steps 32] [--verify_ms 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "core/model/sequence_model.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/cli_args.h"
#include "drafter_service/drafter.h"
#include "worker/target_runner.h"

ABSL_FLAG(std::string, target, "models/demo/target", "Target model directory");
ABSL_FLAG(std::string, drafters,
          "mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter",
          "KIND=DIR[,KIND=DIR...]");
ABSL_FLAG(std::string, prompts, "models/demo/heldout_prompts.txt", "One prompt per line");
ABSL_FLAG(int32_t, num_prompts, 16, "Prompts used (from the top of the file), in batches");
ABSL_FLAG(int32_t, batch, 4, "Sequences drafted and verified together");
ABSL_FLAG(int32_t, steps, 32, "Steps per batch");
ABSL_FLAG(std::string, tree, "3,2,2,1", "Tree shape of every step");
ABSL_FLAG(float, temperature, 0.0f, "Draft temperature (0: greedy drafting and verification)");
ABSL_FLAG(std::string, predraft, "0,1,2,4", "Drafter --predraft settings to compare");
ABSL_FLAG(double, verify_ms, -1.0,
          "Verify window per step in ms (a remote target's verify time); negative: the demo "
          "target's measured in-process verify time");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Result {
  std::vector<double> draft_ms;  // per Draft call, as the caller sees it
  int64_t hits = 0, drafts = 0, full_hits = 0, committed = 0, steps = 0;
  double wall_ms = 0, verify_ms = 0;
};

// Outcomes by [batch][step][sequence]: the tokens the target committed.
using Outcomes = std::vector<std::vector<std::vector<std::vector<int32_t>>>>;

// With `runner`, verifies on it and records `outcomes`; without, replays them
// and sleeps `window_ms` per step.
absl::Status Measure(TargetRunner* runner, Drafter* drafter,
                     const std::vector<std::vector<int32_t>>& prompts, const TreeShape& shape,
                     double window_ms, uint64_t* next_id, Outcomes* outcomes, Result* res) {
  const int batch = absl::GetFlag(FLAGS_batch);
  const int steps = absl::GetFlag(FLAGS_steps);
  const float temperature = absl::GetFlag(FLAGS_temperature);
  const auto window = std::chrono::duration<double, std::milli>(window_ms);
  const Clock::time_point t_start = Clock::now();
  const bool record = runner != nullptr;
  if (record) outcomes->clear();
  size_t batch_index = 0;
  for (size_t b0 = 0; b0 + batch <= prompts.size(); b0 += batch, ++batch_index) {
    std::vector<uint64_t> ids;
    std::vector<std::vector<int32_t>> undrafted;
    if (record) outcomes->push_back({{}});  // step 0: the first tokens
    for (int i = 0; i < batch; ++i) {
      const std::vector<int32_t>& prompt = prompts[b0 + i];
      const uint64_t id = (*next_id)++;
      OpenSpec open;
      open.id = id;
      open.prompt = prompt;
      open.sampling.temperature = temperature;
      open.seed = 1000 + b0 + i;
      open.max_total_tokens =
          static_cast<int64_t>(prompt.size()) + (steps + 1) * (shape.Depth() + 1) + shape.NumNodes();
      int32_t first = 0;
      if (record) {
        OpenOutcome o = runner->Open({open})[0];
        if (!o.status.ok()) return o.status;
        first = o.first_token;
        outcomes->back()[0].push_back({first});
      } else {
        first = (*outcomes)[batch_index][0][i][0];
      }
      std::vector<absl::Status> ds = drafter->Open({{id, prompt}});
      if (!ds[0].ok()) return ds[0];
      ids.push_back(id);
      undrafted.push_back({first});
    }
    for (uint64_t step = 1; step <= static_cast<uint64_t>(steps); ++step) {
      std::vector<DraftSpec> specs;
      for (int i = 0; i < batch; ++i) {
        DraftSpec d;
        d.id = ids[i];
        d.step = step;
        d.new_tokens = undrafted[i];
        d.shape = shape;
        d.temperature = temperature;
        d.seed = 7000 + ids[i];
        specs.push_back(std::move(d));
      }
      const Clock::time_point t0 = Clock::now();
      std::vector<DraftOutcome> douts = drafter->Draft(specs);
      const Clock::time_point t1 = Clock::now();
      res->draft_ms.push_back(Ms(t1 - t0));
      std::vector<StepSpec> verify;
      int step_hits = 0;
      for (int i = 0; i < batch; ++i) {
        if (!douts[i].status.ok()) return douts[i].status;
        step_hits += douts[i].is_predraft_hit ? 1 : 0;
        StepSpec s;
        s.id = ids[i];
        s.step = step;
        s.tree = douts[i].tree;
        verify.push_back(std::move(s));
      }
      res->hits += step_hits;
      res->drafts += batch;
      res->full_hits += step_hits == batch ? 1 : 0;
      if (record) {
        std::vector<StepOutcome> vouts = runner->Verify(verify, nullptr);
        std::vector<std::vector<int32_t>> got;
        for (int i = 0; i < batch; ++i) {
          if (!vouts[i].status.ok()) return vouts[i].status;
          got.push_back(vouts[i].tokens);
        }
        outcomes->back().push_back(std::move(got));
        res->verify_ms += Ms(Clock::now() - t1);
      }
      const std::vector<std::vector<int32_t>>& got = (*outcomes)[batch_index][step];
      for (int i = 0; i < batch; ++i) {
        res->committed += static_cast<int64_t>(got[i].size());
        undrafted[i] = got[i];
      }
      res->steps += 1;
      const Clock::duration spent = Clock::now() - t1;
      if (!record && spent < window) {
        std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(window - spent));
      }
    }
    if (record) runner->Release(ids);
    drafter->Release(ids);
  }
  res->wall_ms = Ms(Clock::now() - t_start);
  return absl::OkStatus();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

int Main() {
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  SequenceModelOptions mo;
  mo.kv_blocks = 1024;
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
  while (std::getline(in, line) &&
         static_cast<int>(prompts.size()) < absl::GetFlag(FLAGS_num_prompts)) {
    if (line.empty()) continue;
    auto ids = (*tok)->Encode(line, true);
    if (ids.ok() && !ids->empty()) prompts.push_back(*ids);
  }
  auto shape = TreeShape::Parse(absl::GetFlag(FLAGS_tree));
  if (prompts.empty() || !shape.ok()) {
    std::fprintf(stderr, "no prompts in %s, or a bad --tree\n", absl::GetFlag(FLAGS_prompts).c_str());
    return 1;
  }
  std::vector<int> settings;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_predraft), ',')) {
    settings.push_back(std::stoi(std::string(s)));
  }
  std::printf("\n%-12s %8s %8s %9s %10s %10s %10s %12s %10s\n", "drafter", "predraft", "hit",
              "all_hit", "p50_ms", "p90_ms", "mean_ms", "saved_ms/st", "tok/s");
  uint64_t next_id = 1;
  double window_ms = absl::GetFlag(FLAGS_verify_ms);
  for (absl::string_view kd : absl::StrSplit(absl::GetFlag(FLAGS_drafters), ',', absl::SkipEmpty())) {
    std::vector<std::string> p = absl::StrSplit(kd, absl::MaxSplits('=', 1));
    double base_mean = -1;
    Outcomes outcomes;
    for (int pass = -1; pass < static_cast<int>(settings.size()); ++pass) {
      const int n = pass < 0 ? 0 : settings[pass];
      DrafterOptions dopt;
      dopt.kind = p[0];
      dopt.model_dir = p[1];
      dopt.max_sequences = absl::GetFlag(FLAGS_batch);
      dopt.max_context = 1024;
      dopt.predraft = n;
      dopt.predraft_sampled = true;
      auto drafter = CreateDrafter(dopt, backend->get());
      if (!drafter.ok()) {
        std::fprintf(stderr, "drafter %s: %s\n", p[0].c_str(), drafter.status().ToString().c_str());
        return 1;
      }
      Result r;
      absl::Status st = Measure(pass < 0 ? &runner : nullptr, drafter->get(), prompts, *shape,
                                window_ms, &next_id, &outcomes, &r);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        return 1;
      }
      if (pass < 0) {
        const double measured = r.verify_ms / std::max<int64_t>(1, r.steps);
        std::printf("%-12s in-process target verify: %.2f ms/step\n", p[0].c_str(), measured);
        if (absl::GetFlag(FLAGS_verify_ms) < 0) window_ms = measured;
        continue;
      }
      double mean = 0;
      for (double x : r.draft_ms) mean += x;
      mean /= std::max<size_t>(1, r.draft_ms.size());
      if (base_mean < 0) base_mean = mean;
      std::printf("%-12s %8d %7.1f%% %8.1f%% %10.2f %10.2f %10.2f %12.2f %10.1f\n", p[0].c_str(), n,
                  100.0 * r.hits / std::max<int64_t>(1, r.drafts),
                  100.0 * r.full_hits / std::max<int64_t>(1, r.steps), Quantile(r.draft_ms, 0.5),
                  Quantile(r.draft_ms, 0.9), mean, base_mean - mean,
                  1000.0 * r.committed / std::max(1e-9, r.wall_ms));
      std::fflush(stdout);
    }
  }
  std::printf("\ntree %s, batch %d, %d steps per batch, %zu prompts, verify window %.1f ms, T %.1f\n",
              shape->ToString().c_str(), absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_steps),
              prompts.size(), window_ms, absl::GetFlag(FLAGS_temperature));
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
