// attention_bench: the CPU attention kernel's paths — scalar loops, AVX2 + FMA,
// and the default (AVX-512 where the CPU has it) — side by side in one run, on
// random q / K / V for a few shapes: decode batches, token trees and prefill
// chunks, at the demo target's heads (8 q / 4 kv heads of 32), SmolLM2-135M's
// (9 / 3 of 64) and a 7B Llama's (32 / 32 heads of 128). Prints milliseconds
// per call (median of the rounds, the paths alternating), the default path's
// speedup over each other one, and the largest difference from the scalar
// output.
//
//   build/bin/attention_bench [--rounds 5] [--threads 1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "core/util/cli_args.h"
#include "kernels/cpu/attention_ops.h"

ABSL_FLAG(int32_t, rounds, 5, "Alternating rounds per shape; the median is printed");
ABSL_FLAG(int32_t, threads, 1, "Threads of the kernel");

namespace treespec {
namespace {

struct Shape {
  std::string name;
  int seqs, ctx, tokens;  // per sequence: committed context, new tokens (a chain)
  int H, Hkv, Dh;
};

AttentionBatch MakeBatch(const Shape& s, int block) {
  AttentionBatch b;
  b.num_seqs = s.seqs;
  b.block_size = block;
  b.max_blocks_per_seq = (s.ctx + s.tokens + block - 1) / block;
  b.query_start.push_back(0);
  for (int i = 0; i < s.seqs; ++i) {
    b.query_start.push_back(b.query_start.back() + s.tokens);
    b.context_lens.push_back(s.ctx);
    b.prior_lens.push_back(0);
    b.mask_offset.push_back(-1);
    for (int k = 0; k < b.max_blocks_per_seq; ++k) {
      b.block_tables.push_back(i * b.max_blocks_per_seq + k);
    }
  }
  return b;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  const std::vector<Shape> shapes = {
      {"demo decode", 1, 256, 1, 8, 4, 32},   {"demo decode", 64, 256, 1, 8, 4, 32},
      {"demo tree", 16, 256, 16, 8, 4, 32},   {"demo prefill", 1, 0, 256, 8, 4, 32},
      {"demo piece", 1, 448, 16, 8, 4, 32},   {"smollm decode", 1, 512, 1, 9, 3, 64},
      {"7B decode", 1, 2048, 1, 32, 32, 128}, {"7B decode", 16, 1024, 1, 32, 32, 128},
      {"7B tree", 4, 1024, 64, 32, 32, 128},
  };
  std::printf("%-14s %5s %5s %6s %9s %9s %9s %8s %8s %10s\n", "shape", "seqs", "ctx", "tokens",
              "scalar ms", "avx2 ms", "auto ms", "vs scal", "vs avx2", "max |diff|");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    const int block = 16;
    const AttentionBatch batch = MakeBatch(s, block);
    const int T = batch.num_tokens();
    const int64_t slots = static_cast<int64_t>(s.seqs) * batch.max_blocks_per_seq * block;
    std::vector<float> q(static_cast<int64_t>(T) * s.H * s.Dh);
    std::vector<float> k(slots * s.Hkv * s.Dh), v(k.size());
    for (auto* buf : {&q, &k, &v}) {
      for (float& x : *buf) x = uniform(rng);
    }
    constexpr int kPaths = 3;
    const cpu::AttentionPath paths[kPaths] = {cpu::AttentionPath::kScalar, cpu::AttentionPath::kAvx2,
                                              cpu::AttentionPath::kAuto};
    std::vector<std::vector<float>> outs(kPaths, std::vector<float>(q.size()));
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.Dh));
    std::vector<double> ms[kPaths];
    for (int r = 0; r < rounds; ++r) {
      for (int p = 0; p < kPaths; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        cpu::Attention(q.data(), k.data(), v.data(), batch, s.H, s.Hkv, s.Dh, scale,
                       outs[p].data(), threads, paths[p]);
        ms[p].push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
    }
    float diff = 0.0f;
    for (int p = 1; p < kPaths; ++p) {
      for (size_t i = 0; i < q.size(); ++i) {
        diff = std::max(diff, std::fabs(outs[0][i] - outs[p][i]));
      }
    }
    const double a = Median(ms[0]), b = Median(ms[1]), c = Median(ms[2]);
    std::printf("%-14s %5d %5d %6d %9.3f %9.3f %9.3f %7.2fx %7.2fx %10.2e\n", s.name.c_str(),
                s.seqs, s.ctx, s.tokens, a, b, c, a / c, b / c, diff);
  }
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
