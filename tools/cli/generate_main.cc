// treespec-generate: in-process autoregressive generation (no services).
// Streams text for one prompt, or writes many samples to a file (corpus mode).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "core/util/cli_args.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/cli/local_model.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face model directory (Llama family or Mamba) or a llama-family .gguf file");
ABSL_FLAG(std::string, prompt, "", "Prompt text (empty: start from BOS)");
ABSL_FLAG(int64_t, max_tokens, 128, "New tokens per sample");
ABSL_FLAG(double, temperature, 0.0, "0: greedy; otherwise sampling temperature");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass in (0, 1]");
ABSL_FLAG(int32_t, top_k, 0, "Keep only the k most likely tokens (0: off)");
ABSL_FLAG(uint64_t, seed, 0, "Random seed (sample i uses seed + i)");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");
ABSL_FLAG(int64_t, num_samples, 1, "Samples to generate (> 1 needs --output)");
ABSL_FLAG(int64_t, batch, 32, "Samples decoded together");
ABSL_FLAG(std::string, output, "",
          "Write samples here, separated by blank lines, instead of streaming to stdout");

namespace treespec {
namespace {

int Fail(const absl::Status& st) {
  std::cerr << "treespec-generate: " << st << std::endl;
  return 1;
}

// A sample as one paragraph block of --output: blank lines inside it collapsed.
std::string ParagraphBlock(const std::string& sample) {
  std::string clean;
  for (char c : sample) {
    if (c == '\n' && !clean.empty() && clean.back() == '\n') continue;
    clean.push_back(c);
  }
  return clean;
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  SamplingParams params;
  params.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  params.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  params.top_k = absl::GetFlag(FLAGS_top_k);
  if (absl::Status st = params.Validate(); !st.ok()) return Fail(st);
  const int64_t num = absl::GetFlag(FLAGS_num_samples);
  const int64_t batch = std::max<int64_t>(1, std::min(absl::GetFlag(FLAGS_batch), num));
  const std::string output = absl::GetFlag(FLAGS_output);
  if (num < 1) return Fail(absl::InvalidArgumentError("--num_samples must be >= 1"));
  if (num > 1 && output.empty()) {
    return Fail(absl::InvalidArgumentError("--num_samples > 1 needs --output FILE"));
  }
  auto tok = LoadTokenizer(dir);
  if (!tok.ok()) return Fail(tok.status());
  auto prompt = (*tok)->Encode(absl::GetFlag(FLAGS_prompt), true);
  if (!prompt.ok()) return Fail(prompt.status());
  if (prompt->empty()) {
    if ((*tok)->bos_id() < 0) return Fail(absl::InvalidArgumentError("--prompt: empty and no BOS"));
    prompt->push_back((*tok)->bos_id());
  }
  const int64_t max_new = absl::GetFlag(FLAGS_max_tokens);
  auto model = LocalModel::Load(dir, absl::GetFlag(FLAGS_device), batch,
                                static_cast<int64_t>(prompt->size()) + max_new + 1);
  if (!model.ok()) return Fail(model.status());
  std::vector<int32_t> stops = (*tok)->eos_ids();
  std::ofstream out;
  if (!output.empty()) {
    out.open(output, std::ios::binary);
    if (!out) return Fail(absl::PermissionDeniedError("--output: cannot open " + output));
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  int64_t produced = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t first = 0; first < num; first += batch) {
    const int64_t n = std::min(batch, num - first);
    std::vector<std::vector<int32_t>> prompts(n, *prompt);
    std::vector<uint64_t> seeds;
    for (int64_t i = 0; i < n; ++i) seeds.push_back(seed + first + i);
    std::vector<std::unique_ptr<IncrementalDetokenizer>> detok;
    std::vector<std::string> text(n);
    for (int64_t i = 0; i < n; ++i) detok.push_back(std::make_unique<IncrementalDetokenizer>(tok->get()));
    absl::Status st = (*model)->Generate(
        prompts, params, seeds, max_new, stops, [&](size_t i, int32_t t) {
          ++produced;
          if ((*tok)->IsEos(t)) return;
          std::string delta = detok[i]->Push(t);
          if (output.empty()) {
            std::fwrite(delta.data(), 1, delta.size(), stdout);
            std::fflush(stdout);
          } else {
            text[i] += delta;
          }
        });
    if (!st.ok()) return Fail(st);
    for (int64_t i = 0; i < n; ++i) {
      std::string rest = detok[i]->Finish();
      if (output.empty()) {
        std::fwrite(rest.data(), 1, rest.size(), stdout);
      } else {
        out << ParagraphBlock(absl::GetFlag(FLAGS_prompt) + text[i] + rest) << "\n\n";
      }
    }
    if (!output.empty()) {
      std::cerr << "\rsamples " << first + n << "/" << num << std::flush;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n%lld tokens in %.2f s: %.1f tokens/s\n", static_cast<long long>(produced),
               secs, produced / std::max(secs, 1e-9));
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "In-process generation with a local model.\n"
      "Usage: treespec-generate --model DIR --prompt TEXT [--max_tokens N --temperature T "
      "--top_p P --top_k K --seed S] [--num_samples N --batch B --output FILE]");
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
