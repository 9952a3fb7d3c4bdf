// engine_bench: CPU engine throughput. Prefill and decode tokens/s at batch 1
// and 8 for a ~110M-parameter Llama shape and a Mamba-130M shape (random
// weights), with the bytes a decode step must move and the bandwidth that
// implies, next to this machine's measured memory read bandwidth.
//
//   build/bin/engine_bench [--device cpu] [--decode_steps 16] [--prefill 128]
#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

#include "absl/flags/flag.h"
#include "core/model/llama.h"
#include "core/model/mamba.h"
#include "core/util/cli_args.h"

ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu[:THREADS][:f32|f16|bf16|auto] (CPU weight type), cuda[:N][:f16|bf16]");
ABSL_FLAG(int32_t, decode_steps, 16, "Timed decode steps per configuration");
ABSL_FLAG(int32_t, prefill, 128, "Prompt tokens per sequence for the prefill measurement");
ABSL_FLAG(int32_t, repeats, 3, "Repeats; the best is reported");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Read bandwidth: all threads sum a 512 MiB buffer (much larger than the
// caches), best of 3.
double MeasureReadBandwidth() {
  std::vector<float> buf(128u << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i & 7);
  double best = 0.0;
  const int64_t n = static_cast<int64_t>(buf.size());
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t c = 0; c < n / 4096; ++c) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const float* p = buf.data() + c * 4096;
      for (int i = 0; i < 4096; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
      }
      for (int j = 0; j < 8; ++j) total += acc[j];
    }
    auto t1 = Clock::now();
    volatile double sink = total;
    (void)sink;
    best = std::max(best, n * 4.0 / Secs(t0, t1));
  }
  return best;
}

struct Row {
  std::string model, phase;
  int batch;
  double tokens_per_s;
  double bytes_per_step;
  double step_ms;
};

void Print(const std::vector<Row>& rows, double bw) {
  std::printf("\n%-12s %-8s %5s %12s %10s %14s %10s %8s\n", "model", "phase", "batch", "tokens/s",
              "step ms", "bytes/step", "GB/s", "of peak");
  for (const Row& r : rows) {
    if (r.bytes_per_step > 0) {
      const double gbs = r.bytes_per_step / (r.step_ms / 1e3) / 1e9;
      std::printf("%-12s %-8s %5d %12.1f %10.2f %14.3e %10.2f %7.0f%%\n", r.model.c_str(),
                  r.phase.c_str(), r.batch, r.tokens_per_s, r.step_ms, r.bytes_per_step, gbs,
                  100.0 * gbs * 1e9 / bw);
    } else {
      std::printf("%-12s %-8s %5d %12.1f %10.2f %14s %10s %8s\n", r.model.c_str(), r.phase.c_str(),
                  r.batch, r.tokens_per_s, r.step_ms, "-", "-", "-");
    }
  }
  std::printf("\nmeasured memory read bandwidth: %.2f GB/s (512 MiB parallel sum, best of 3)\n",
              bw / 1e9);
}

int Main() {
  auto backend = CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  Backend* be = backend->get();
  const int steps = absl::GetFlag(FLAGS_decode_steps), prefill = absl::GetFlag(FLAGS_prefill);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::vector<Row> rows;

  // ---- Llama ~110M: hidden 768, 12 layers, 12 heads, ffn 2048, vocab 32000, tied.
  LlamaConfig lc;
  lc.vocab_size = 32000;
  lc.hidden_size = 768;
  lc.intermediate_size = 2048;
  lc.num_layers = 12;
  lc.num_heads = 12;
  lc.num_kv_heads = 12;
  lc.head_dim = 64;
  lc.tie_word_embeddings = true;
  lc.max_position_embeddings = 2048;
  WeightLoader lload(1, 0.02f, be);
  auto llama = LlamaModel::Create(lc, &lload, nullptr);
  if (!llama.ok()) {
    std::fprintf(stderr, "%s\n", llama.status().ToString().c_str());
    return 1;
  }
  const double llama_params = static_cast<double>(lc.NumParameters());
  std::printf("llama: %.1fM parameters, mamba follows\n", llama_params / 1e6);
  for (int batch : {1, 8}) {
    auto cache = PagedKvCache::Create((*llama)->KvOptions(batch * (prefill + steps + 32) / 16 + batch,
                                                          16), be);
    double best_prefill = 0, best_decode = 0, decode_ms = 0;
    for (int r = 0; r < repeats; ++r) {
      std::vector<int64_t> seqs;
      std::vector<ForwardSeq> batch_in;
      for (int b = 0; b < batch; ++b) {
        int64_t s = (*cache)->CreateSequence();
        (void)(*cache)->Reserve(s, prefill + steps + 1);
        seqs.push_back(s);
        std::vector<int32_t> prompt(prefill);
        for (int i = 0; i < prefill; ++i) prompt[i] = (i * 7919 + b * 31) % lc.vocab_size;
        batch_in.push_back({s, prompt, {}, LogitsMode::kLast});
      }
      ForwardOutput fo;
      auto t0 = Clock::now();
      (void)(*llama)->Forward(batch_in, cache->get(), &fo);
      auto t1 = Clock::now();
      for (int64_t s : seqs) (void)(*cache)->Commit(s, prefill);
      best_prefill = std::max(best_prefill, batch * prefill / Secs(t0, t1));
      auto t2 = Clock::now();
      for (int k = 0; k < steps; ++k) {
        std::vector<ForwardSeq> dec;
        for (int64_t s : seqs) dec.push_back({s, {static_cast<int32_t>((k * 13) % lc.vocab_size)}, {}, LogitsMode::kLast});
        (void)(*llama)->Forward(dec, cache->get(), &fo);
        for (int64_t s : seqs) (void)(*cache)->Commit(s, 1);
      }
      auto t3 = Clock::now();
      const double tps = batch * steps / Secs(t2, t3);
      if (tps > best_decode) {
        best_decode = tps;
        decode_ms = Secs(t2, t3) / steps * 1e3;
      }
      for (int64_t s : seqs) (*cache)->Release(s);
    }
    // A decode step reads every weight once (f32) plus each sequence's KV.
    const double kv = 2.0 * lc.num_layers * lc.num_kv_heads * lc.head_dim * 4.0 * (prefill + steps / 2.0) * batch;
    rows.push_back({"llama-110M", "prefill", batch, best_prefill, 0, 0});
    rows.push_back({"llama-110M", "decode", batch, best_decode, llama_params * 4.0 + kv, decode_ms});
  }

  // ---- Mamba-130M: hidden 768, 24 layers, state 16, expand 2, conv 4, vocab 50280.
  MambaConfig mc;
  mc.vocab_size = 50280;
  mc.hidden_size = 768;
  mc.num_layers = 24;
  mc.state_size = 16;
  mc.intermediate_size = 1536;
  mc.conv_kernel = 4;
  mc.time_step_rank = 48;
  WeightLoader mload(2, 0.02f, be);
  auto mamba = MambaModel::Create(mc, &mload);
  if (!mamba.ok()) {
    std::fprintf(stderr, "%s\n", mamba.status().ToString().c_str());
    return 1;
  }
  const double mamba_params = static_cast<double>(mc.NumParameters());
  for (int batch : {1, 8}) {
    auto pool = MambaStatePool::Create(mc, batch, be);
    double best_prefill = 0, best_decode = 0, decode_ms = 0;
    for (int r = 0; r < repeats; ++r) {
      std::vector<int32_t> slots;
      for (int b = 0; b < batch; ++b) slots.push_back(*(*pool)->Allocate());
      std::vector<float> logits;
      auto t0 = Clock::now();
      for (int b = 0; b < batch; ++b) {
        std::vector<int32_t> prompt(prefill);
        for (int i = 0; i < prefill; ++i) prompt[i] = (i * 7919 + b * 31) % mc.vocab_size;
        (void)(*mamba)->Prefill(prompt, slots[b], pool->get(), &logits);
      }
      auto t1 = Clock::now();
      best_prefill = std::max(best_prefill, batch * prefill / Secs(t0, t1));
      auto t2 = Clock::now();
      for (int k = 0; k < steps; ++k) {
        std::vector<int32_t> toks(batch, static_cast<int32_t>((k * 13) % mc.vocab_size));
        (void)(*mamba)->Step(toks, slots, pool->get(), &logits);
      }
      auto t3 = Clock::now();
      const double tps = batch * steps / Secs(t2, t3);
      if (tps > best_decode) {
        best_decode = tps;
        decode_ms = Secs(t2, t3) / steps * 1e3;
      }
      for (int32_t s : slots) (*pool)->Free(s);
    }
    // A step reads every weight once plus each state (conv + ssm) twice (read, write).
    const double state = 2.0 * mc.num_layers * mc.intermediate_size * (mc.state_size + mc.conv_kernel) * 4.0 * batch;
    rows.push_back({"mamba-130M", "prefill", batch, best_prefill, 0, 0});
    rows.push_back({"mamba-130M", "decode", batch, best_decode, mamba_params * 4.0 + state, decode_ms});
  }
  Print(rows, MeasureReadBandwidth());
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
