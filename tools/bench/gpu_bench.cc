// gpu_bench: device ceilings and step times of the CUDA backend, as tables.
//
//   (1) ceilings: device-to-device copy bandwidth (bytes read + written per
//       second), read-only bandwidth (ArgmaxRows scanning 1 GiB), and cuBLAS
//       fp16 GEMM rate (Backend::Linear, 8192³, random data);
//   (2) target verify step of a 7B-shape fp16 Llama (random weights filled on
//       the device) for one sequence with a 512-token cached prefix, at 1, 2,
//       3, 4, 8, 16 and 64 tree tokens as a chain (and at 4, 16 and 64 also
//       as a balanced binary tree),
//       against the HBM floor = weight bytes / the best bandwidth of (1)
//       (read-only scan, or the copy's bytes read + written per second), with
//       the few-row kernel (kernels/cuda/skinny_linear.h) for steps of <= 8
//       tokens and with cuBLAS for every product, side by side; first, each of
//       the step's matrix products alone at 1-16 rows (weights cycled through
//       more copies than L2 holds), cuBLAS against the few-row kernel, and
//       the step's products summed, so the step splits into products and rest;
//   (3) step of a Mamba-130M-shape drafter at batch 1 … 64, eager and with
//       CUDA graphs (MambaModel::SetUseGraphs).
// Times are medians of CUDA-event intervals on the backend's stream after
// warm-up; every step includes its host work and the logits download, as a
// server sees it.
//
// Usage: gpu_bench [--quick] [--iters N] [--skip-llama] [--skip-mamba]
//                  [--profile-step TOKENS]
//   --quick shrinks the models (4 layers) for a smoke run;
//   --profile-step runs only one 7B verify step of TOKENS chain tokens inside
//   cudaProfilerStart/Stop, for `ncu --profile-from-start off` (kernel times
//   by name: tools/bench/ncu_summary.py).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
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
  int profile_tokens = 0;  // > 0: only ProfileStep
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

// The 7B step's matrix products, one layer's and the LM head's, [N, K].
struct Product {
  const char* name;
  int64_t N, K;
  int per_step;  // how many a step runs (per layer x layers, or 1)
};

// Milliseconds of one product of T rows for each of `products`, with the
// few-row kernel allowed up to `skinny_rows` rows (0: cuBLAS only). Weights
// are cycled through copies totalling >= 256 MB, so none is read from L2.
std::vector<double> ProductMs(Backend* be, cudaStream_t stream, const Options& o,
                              const std::vector<Product>& products, int T, int skinny_rows) {
  const int before = cuda::SetSkinnyMaxRows(be, skinny_rows);
  std::vector<double> out;
  for (const Product& p : products) {
    const int64_t bytes = 2 * p.N * p.K;
    const int copies =
        static_cast<int>(std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes));
    std::vector<Tensor> ws;
    for (int i = 0; i < copies; ++i) {
      ws.push_back(Unwrap(be->Alloc(DType::kF16, {p.N, p.K}), "alloc"));
      BENCH_CHECK(be->FillUniform(&ws.back(), 10 + i, 0.02f));
    }
    Tensor x = Unwrap(be->Alloc(DType::kF16, {T, p.K}), "alloc");
    Tensor y = Unwrap(be->Alloc(DType::kF16, {T, p.N}), "alloc");
    BENCH_CHECK(be->FillUniform(&x, 9, 1.0f));
    const double ms = MedianMs(stream, 1, o.iters, [&] {
      for (const Tensor& w : ws) BENCH_CHECK(be->Linear(x, w, &y));
    });
    out.push_back(ms / copies);
  }
  cuda::SetSkinnyMaxRows(be, before);
  return out;
}

// Prints the products table; returns the summed product milliseconds of one
// step by row count, each product taking the faster of the two.
std::vector<std::pair<int, double>> BenchProducts(Backend* be, cudaStream_t stream,
                                                  const Ceilings& c, const Options& o,
                                                  const std::vector<Product>& products) {
  const double bw_gbs = std::max(c.read_gbs, c.copy_gbs);
  std::printf("\n(2a) the 7B step's matrix products alone (fp16, weights not in L2): GB/s of "
              "weights read, cuBLAS against the few-row kernel (rows <= 8); %%floor = GB/s "
              "against %.0f GB/s\n", bw_gbs);
  std::printf("  %-5s %-9s %10s %12s %10s %12s %10s %8s\n", "rows", "product", "[N, K]",
              "cuBLAS us", "GB/s", "few-row us", "GB/s", "%floor");
  std::vector<std::pair<int, double>> sums;
  for (int T : {1, 2, 3, 4, 8, 16}) {
    const std::vector<double> blas = ProductMs(be, stream, o, products, T, 0);
    const std::vector<double> skinny =
        T <= 8 ? ProductMs(be, stream, o, products, T, 8) : blas;
    double sum = 0;
    for (size_t i = 0; i < products.size(); ++i) {
      const Product& p = products[i];
      const double gb = 2.0 * p.N * p.K / 1e9;
      const std::string shape = std::to_string(p.N) + "x" + std::to_string(p.K);
      std::printf("  %-5d %-9s %10s %12.1f %10.0f", T, p.name, shape.c_str(), 1e3 * blas[i],
                  gb / (blas[i] * 1e-3));
      if (T <= 8) {
        std::printf(" %12.1f %10.0f %8.0f\n", 1e3 * skinny[i], gb / (skinny[i] * 1e-3),
                    100.0 * gb / (skinny[i] * 1e-3) / bw_gbs);
      } else {
        std::printf(" %12s %10s %8.0f\n", "-", "-", 100.0 * gb / (blas[i] * 1e-3) / bw_gbs);
      }
      sum += p.per_step * std::min(blas[i], skinny[i]);
    }
    sums.emplace_back(T, sum);
  }
  return sums;
}

LlamaConfig SevenBShape(const Options& o) {
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
  return cfg;
}

// One verify step of `o.profile_tokens` chain tokens on the 7B shape after a
// 512-token prefix, between cudaProfilerStart and Stop, for
// `ncu --profile-from-start off` (tools/bench/ncu_summary.py sums its kernels).
void ProfileStep(Backend* be, cudaStream_t stream, const Options& o) {
  const LlamaConfig cfg = SevenBShape(o);
  WeightLoader loader(/*seed=*/1, /*scale=*/0.02f, be);
  auto model = Unwrap(LlamaModel::Create(cfg, &loader, nullptr), "llama create");
  auto cache = Unwrap(PagedKvCache::Create(model->KvOptions(64, 16), be), "kv cache");
  const int64_t seq = cache->CreateSequence();
  const int prefix = 512, n = o.profile_tokens;
  BENCH_CHECK(cache->Reserve(seq, prefix + n));
  std::vector<int32_t> prompt(prefix), tokens(n);
  for (int i = 0; i < prefix; ++i) prompt[i] = (i * 7919 + 13) % cfg.vocab_size;
  for (int i = 0; i < n; ++i) tokens[i] = (i * 31 + 101) % cfg.vocab_size;
  ForwardOutput fo;
  BENCH_CHECK(model->Forward({{seq, prompt, {}, LogitsMode::kLast}}, cache.get(), &fo));
  BENCH_CHECK(cache->Commit(seq, prefix));
  const auto step = [&] {
    BENCH_CHECK(model->Forward({{seq, tokens, {}, LogitsMode::kAll}}, cache.get(), &fo));
  };
  const double ms = MedianMs(stream, 3, o.iters, step);
  CUDA_BENCH_CHECK(cudaProfilerStart());
  step();
  CUDA_BENCH_CHECK(cudaStreamSynchronize(stream));
  CUDA_BENCH_CHECK(cudaProfilerStop());
  std::printf("profiled one %d-token step of the %d-layer 7B shape; unprofiled median %.3f ms\n",
              n, static_cast<int>(cfg.num_layers), ms);
}

void BenchLlama(Backend* be, cudaStream_t stream, const Ceilings& c, const Options& o) {
  const LlamaConfig cfg = SevenBShape(o);
  const int64_t qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim;
  const int L = static_cast<int>(cfg.num_layers);
  const std::vector<Product> products = {
      {"q/k/v", qkv_rows, cfg.hidden_size, L},
      {"o", cfg.hidden_size, cfg.num_heads * cfg.head_dim, L},
      {"gate/up", 2 * cfg.intermediate_size, cfg.hidden_size, L},
      {"down", cfg.hidden_size, cfg.intermediate_size, L},
      {"lm_head", cfg.vocab_size, cfg.hidden_size, 1}};
  const std::vector<std::pair<int, double>> product_ms =
      BenchProducts(be, stream, c, o, products);
  WeightLoader loader(/*seed=*/1, /*scale=*/0.02f, be);
  auto model = Unwrap(LlamaModel::Create(cfg, &loader, nullptr), "llama create");
  BENCH_CHECK(be->Synchronize());
  const int64_t D = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t per_layer = D * qkv_rows + cfg.num_heads * cfg.head_dim * D + 3 * F * D + 2 * D;
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
  const int shipped_rows = cuda::SetSkinnyMaxRows(be, 0);
  cuda::SetSkinnyMaxRows(be, shipped_rows);
  std::printf("    step ms: as shipped (few-row kernel up to %d rows); cuBLAS-only / few-row: "
              "every product of <= 8 rows on cuBLAS / on the few-row kernel; products ms: the "
              "step's products alone, the faster of the two each, from (2a); rest = step - "
              "products\n", shipped_rows);
  std::printf("  %-12s %-9s %12s %12s %14s %18s %14s %12s %12s %10s\n", "tree tokens", "shape",
              "step ms", "floor ms", "step / floor", "logits D2H ms", "cuBLAS-only ms",
              "few-row ms", "products ms", "rest ms");
  for (int n : {1, 2, 3, 4, 8, 16, 64}) {
    for (int tree = 0; tree < 2; ++tree) {
      if ((n <= 3 || n == 8) && tree == 1) continue;
      std::vector<int32_t> tokens(n);
      for (int i = 0; i < n; ++i) tokens[i] = (i * 31 + 101) % V;
      const std::vector<int32_t> parents = tree ? BalancedTree(n) : std::vector<int32_t>{};
      const auto step_ms = [&] {
        return MedianMs(stream, 3, o.iters, [&] {
          BENCH_CHECK(
              model->Forward({{seq, tokens, parents, LogitsMode::kAll}}, cache.get(), &fo));
        });
      };
      const double ms = step_ms();
      double blas_ms = ms, few_ms = ms;
      if (n <= 8) {
        const int before = cuda::SetSkinnyMaxRows(be, 0);
        blas_ms = step_ms();
        cuda::SetSkinnyMaxRows(be, 8);
        few_ms = step_ms();
        cuda::SetSkinnyMaxRows(be, before);
      }
      // The part of the step spent bringing [n, V] logits to the host as f32.
      Tensor logits = Unwrap(be->Alloc(be->activation_dtype(), {n, V}), "alloc");
      std::vector<float> host(n * V);
      const double d2h_ms =
          MedianMs(stream, 1, o.iters, [&] { BENCH_CHECK(be->DownloadF32(logits, host.data())); });
      double products_ms = -1;
      for (const auto& [rows, sum] : product_ms) {
        if (rows == n) products_ms = sum;
      }
      std::printf("  %-12d %-9s %12.3f %12.3f %14.2f %18.3f %14.3f %12.3f", n,
                  tree ? "tree" : "chain", ms, floor_ms, ms / floor_ms, d2h_ms, blas_ms, few_ms);
      if (products_ms >= 0) {
        std::printf(" %12.3f %10.3f\n", products_ms, ms - products_ms);
      } else {
        std::printf(" %12s %10s\n", "-", "-");
      }
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
    } else if (a == "--profile-step" && i + 1 < argc) {
      o.profile_tokens = std::atoi(argv[++i]);
      if (o.profile_tokens < 1) {
        std::fprintf(stderr, "--profile-step: %s is not a token count >= 1\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--iters N] [--skip-llama] [--skip-mamba] "
                   "[--profile-step TOKENS]\n",
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
  if (o.profile_tokens > 0) {
    treespec::ProfileStep(be, stream, o);
    return 0;
  }
  const treespec::Ceilings c = treespec::MeasureCeilings(be, stream, o);
  if (o.llama) treespec::BenchLlama(be, stream, c, o);
  if (o.mamba) treespec::BenchMamba(be, stream, o);
  return 0;
}
