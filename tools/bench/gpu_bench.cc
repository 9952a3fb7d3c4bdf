// gpu_bench: device ceilings and step times of the CUDA backend, as tables.
//
//   (1) ceilings: device-to-device copy bandwidth (bytes read + written per
//       second), read-only bandwidth (ArgmaxRows scanning 1 GiB), and cuBLAS
//       fp16 GEMM rate (Backend::Linear, 8192³, random data);
//   (2) target verify step of a 7B-shape fp16 Llama (random weights filled on
//       the device) for one sequence with a 512-token cached prefix, at 1, 4,
//       16 and 64 tree tokens shaped as a chain and as a balanced binary tree,
//       against the HBM floor = weight bytes / the best bandwidth of (1)
//       (read-only scan, or the copy's bytes read + written per second);
//   (3) step of a Mamba-130M-shape drafter at batch 1 … 64, eager and with
//       CUDA graphs (MambaModel::SetUseGraphs).
// Times are medians of CUDA-event intervals on the backend's stream after
// warm-up; every step includes its host work and the logits download, as a
// server sees it.
//
// Usage: gpu_bench [--quick] [--iters N] [--skip-llama] [--skip-mamba]
//   --quick shrinks the models (4 layers) for a smoke run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "core/model/mamba.h"
#include "core/model/ssm_state.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace treespec {
namespace {

struct Options {
  bool quick = false;
  int iters = 15;
  bool llama = true;
  bool mamba = true;
};

#define BENCH_CHECK(expr)                                                            \
  do {                                                                               \
    const absl::Status bench_status_ = (expr);                                       \
    if (!bench_status_.ok()) {                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                        \
                   bench_status_.ToString().c_str());                                \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

#define CUDA_BENCH_CHECK(expr)                                                          \
  do {                                                                                  \
    const cudaError_t bench_err_ = (expr);                                              \
    if (bench_err_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                \
                   cudaGetErrorString(bench_err_));                                     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

template <typename T>
T Unwrap(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

// Median milliseconds of `run` between two events on `stream`, after `warmup` runs.
double MedianMs(cudaStream_t stream, int warmup, int iters, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  CUDA_BENCH_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CUDA_BENCH_CHECK(cudaEventCreate(&start));
  CUDA_BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    CUDA_BENCH_CHECK(cudaEventRecord(start, stream));
    run();
    CUDA_BENCH_CHECK(cudaEventRecord(stop, stream));
    CUDA_BENCH_CHECK(cudaEventSynchronize(stop));
    float t = 0.0f;
    CUDA_BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Ceilings {
  double copy_gbs = 0;  // bytes read + written per second
  double read_gbs = 0;  // bytes read per second
  double gemm_tflops = 0;
};

Ceilings MeasureCeilings(Backend* be, cudaStream_t stream, const Options& o) {
  Ceilings c;
  const int64_t bytes = int64_t{1} << 30;
  {
    Tensor a = Unwrap(be->Alloc(DType::kF16, {bytes / 2}), "alloc");
    Tensor b = Unwrap(be->Alloc(DType::kF16, {bytes / 2}), "alloc");
    BENCH_CHECK(be->FillUniform(&a, 1, 1.0f));
    const double ms = MedianMs(stream, 2, o.iters, [&] {
      CUDA_BENCH_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), bytes, cudaMemcpyDeviceToDevice, stream));
    });
    c.copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    Tensor logits = a.Reshape({4096, bytes / 2 / 4096});
    std::vector<int32_t> ids;
    const double read_ms =
        MedianMs(stream, 2, o.iters, [&] { BENCH_CHECK(be->ArgmaxRows(logits, &ids)); });
    c.read_gbs = bytes / (read_ms * 1e-3) / 1e9;
  }
  {
    const int64_t n = o.quick ? 4096 : 8192;
    Tensor x = Unwrap(be->Alloc(DType::kF16, {n, n}), "alloc");
    Tensor w = Unwrap(be->Alloc(DType::kF16, {n, n}), "alloc");
    Tensor y = Unwrap(be->Alloc(DType::kF16, {n, n}), "alloc");
    BENCH_CHECK(be->FillUniform(&x, 2, 1.0f));
    BENCH_CHECK(be->FillUniform(&w, 3, 0.01f));
    const double ms = MedianMs(stream, 2, o.iters, [&] { BENCH_CHECK(be->Linear(x, w, &y)); });
    c.gemm_tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  }
  std::printf("\n(1) device ceilings (median of %d)\n", o.iters);
  std::printf("  %-44s %10.0f GB/s\n", "D2D copy, 1 GiB (bytes read + written)", c.copy_gbs);
  std::printf("  %-44s %10.0f GB/s\n", "read-only scan, 1 GiB (ArgmaxRows)", c.read_gbs);
  std::printf("  %-44s %10.1f TFLOP/s\n",
              o.quick ? "cuBLAS fp16 GEMM 4096^3 (Linear)" : "cuBLAS fp16 GEMM 8192^3 (Linear)",
              c.gemm_tflops);
  return c;
}

// Balanced binary tree in breadth-first order: parent(i) = (i - 1) / 2.
std::vector<int32_t> BalancedTree(int n) {
  std::vector<int32_t> parents(n);
  for (int i = 0; i < n; ++i) parents[i] = i == 0 ? -1 : (i - 1) / 2;
  return parents;
}

void BenchLlama(Backend* be, cudaStream_t stream, const Ceilings& c, const Options& o) {
  LlamaConfig cfg;
  cfg.vocab_size = 32000;
  cfg.hidden_size = 4096;
  cfg.intermediate_size = 11008;
  cfg.num_layers = o.quick ? 4 : 32;
  cfg.num_heads = 32;
  cfg.num_kv_heads = 32;
  cfg.head_dim = 128;
  cfg.rms_norm_eps = 1e-5;
  cfg.rope_theta = 10000.0;
  cfg.max_position_embeddings = 4096;
  WeightLoader loader(/*seed=*/1, /*scale=*/0.02f, be);
  auto model = Unwrap(LlamaModel::Create(cfg, &loader, nullptr), "llama create");
  BENCH_CHECK(be->Synchronize());
  const int64_t D = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim;
  const int64_t per_layer = D * qkv + cfg.num_heads * cfg.head_dim * D + 3 * F * D + 2 * D;
  // Bytes one step must read: every layer's weights, the final norm and the LM head.
  const double weight_bytes = 2.0 * (cfg.num_layers * per_layer + D + V * D);
  const int prefix = 512;
  auto cache = Unwrap(PagedKvCache::Create(model->KvOptions(64, 16), be), "kv cache");
  const int64_t seq = cache->CreateSequence();
  BENCH_CHECK(cache->Reserve(seq, prefix + 64));
  std::vector<int32_t> prompt(prefix);
  for (int i = 0; i < prefix; ++i) prompt[i] = (i * 7919 + 13) % V;
  ForwardOutput fo;
  const double prefill_ms = MedianMs(stream, 0, 1, [&] {
    BENCH_CHECK(model->Forward({{seq, prompt, {}, LogitsMode::kLast}}, cache.get(), &fo));
  });
  BENCH_CHECK(cache->Commit(seq, prefix));
  // The floor uses the best bandwidth measured: a read-only stream can reach at
  // least the copy's combined read + write rate.
  const double bw_gbs = std::max(c.read_gbs, c.copy_gbs);
  const double floor_ms = weight_bytes / (bw_gbs * 1e9) * 1e3;
  const double kv_mb = 2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * (prefix + 64) / 1e6;
  std::printf("\n(2) 7B-shape fp16 Llama verify step (%d layers, hidden 4096, 32 heads, 32 kv "
              "heads, ffn 11008, vocab 32000), 1 sequence, %d-token cached prefix\n",
              static_cast<int>(cfg.num_layers), prefix);
  std::printf("    weights read per step %.2f GB; HBM floor = weight bytes / max(read-only, copy "
              "read+write) bandwidth (%.0f GB/s) = %.3f ms; KV read <= %.0f MB; prefill of the "
              "prefix (first call, cold) %.1f ms\n",
              weight_bytes / 1e9, bw_gbs, floor_ms, kv_mb, prefill_ms);
  std::printf("  %-12s %-9s %12s %12s %14s %18s\n", "tree tokens", "shape", "step ms", "floor ms",
              "step / floor", "logits D2H ms");
  for (int n : {1, 4, 16, 64}) {
    for (int tree = 0; tree < 2; ++tree) {
      if (n == 1 && tree == 1) continue;
      std::vector<int32_t> tokens(n);
      for (int i = 0; i < n; ++i) tokens[i] = (i * 31 + 101) % V;
      const std::vector<int32_t> parents = tree ? BalancedTree(n) : std::vector<int32_t>{};
      const double ms = MedianMs(stream, 3, o.iters, [&] {
        BENCH_CHECK(model->Forward({{seq, tokens, parents, LogitsMode::kAll}}, cache.get(), &fo));
      });
      // The part of the step spent bringing [n, V] logits to the host as f32.
      Tensor logits = Unwrap(be->Alloc(be->activation_dtype(), {n, V}), "alloc");
      std::vector<float> host(n * V);
      const double d2h_ms =
          MedianMs(stream, 1, o.iters, [&] { BENCH_CHECK(be->DownloadF32(logits, host.data())); });
      std::printf("  %-12d %-9s %12.3f %12.3f %14.2f %18.3f\n", n, tree ? "tree" : "chain", ms,
                  floor_ms, ms / floor_ms, d2h_ms);
    }
  }
}

void BenchMamba(Backend* be, cudaStream_t stream, const Options& o) {
  MambaConfig cfg;
  cfg.vocab_size = 50280;
  cfg.hidden_size = 768;
  cfg.num_layers = o.quick ? 4 : 24;
  cfg.state_size = 16;
  cfg.intermediate_size = 1536;
  cfg.conv_kernel = 4;
  cfg.time_step_rank = 48;
  cfg.layer_norm_epsilon = 1e-5;
  WeightLoader loader(/*seed=*/2, /*scale=*/0.02f, be);
  auto model = Unwrap(MambaModel::Create(cfg, &loader), "mamba create");
  auto pool = Unwrap(MambaStatePool::Create(cfg, 64, be), "state pool");
  std::printf("\n(3) Mamba-130M-shape drafter step (%d layers, hidden 768, state 16, expand 2, "
              "conv 4, vocab 50280), logits downloaded each step\n",
              static_cast<int>(cfg.num_layers));
  std::printf("  %-8s %12s %12s %10s %16s\n", "batch", "eager ms", "graph ms", "speedup",
              "graph us/token");
  std::vector<float> logits;
  for (int B : {1, 2, 4, 8, 16, 32, 64}) {
    std::vector<int32_t> tokens(B), slots(B);
    for (int i = 0; i < B; ++i) {
      tokens[i] = (i * 977 + 5) % cfg.vocab_size;
      slots[i] = i;
    }
    double ms[2];
    for (int graphs = 0; graphs < 2; ++graphs) {
      model->SetUseGraphs(graphs == 1);
      ms[graphs] = MedianMs(stream, 3, o.iters, [&] {
        BENCH_CHECK(model->Step(tokens, slots, pool.get(), &logits));
      });
    }
    std::printf("  %-8d %12.3f %12.3f %10.2f %16.1f\n", B, ms[0], ms[1], ms[0] / ms[1],
                1e3 * ms[1] / B);
  }
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--iters" && i + 1 < argc) {
      o.iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--skip-llama") {
      o.llama = false;
    } else if (a == "--skip-mamba") {
      o.mamba = false;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--iters N] [--skip-llama] [--skip-mamba]\n",
                   argv[0]);
      return 2;
    }
  }
  auto backend = treespec::CreateBackend("cuda");
  if (!backend.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", backend.status().ToString().c_str());
    return 77;
  }
  treespec::Backend* be = backend->get();
  cudaStream_t stream = treespec::cuda::StreamOf(be);
  std::printf("gpu_bench on %s\n", be->name().c_str());
  const treespec::Ceilings c = treespec::MeasureCeilings(be, stream, o);
  if (o.llama) treespec::BenchLlama(be, stream, c, o);
  if (o.mamba) treespec::BenchMamba(be, stream, o);
  return 0;
}
