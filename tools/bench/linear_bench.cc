// linear_bench: one CPU matrix product (LinearTyped, kernels/cpu/dense_ops.h)
// at decode and prefill sizes, per weight type and thread count, with the
// weights read from memory as in a model's step: the product cycles through
// enough copies of the matrix (--pool_mib) that none is in a cache when it is
// read. Prints the time per product, the weight bytes read per second, and
// the speed-up of each thread count over the first.
//
//   build/bin/linear_bench [--shapes 576x576,1536x576,576x1536,49152x576]
//       [--types q4_1,q8_0,q4_k,f16] [--rows 1,64] [--threads 1,2]
//       [--path auto|avx2|avx2-f32|f32fma|portable]
//
// A shape is NxK (output columns x input length); types whose blocks do not
// divide K are skipped.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/tensor/dtype.h"
#include "core/util/cli_args.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/linear_int.h"

ABSL_FLAG(std::string, shapes, "576x576,1536x576,576x1536,49152x576", "NxK products");
ABSL_FLAG(std::string, types, "q4_1,q8_0,q4_k,f16", "Weight types");
ABSL_FLAG(std::string, rows, "1,64", "Activation rows T (1: decode)");
ABSL_FLAG(std::string, threads, "1,2", "Thread counts");
ABSL_FLAG(int32_t, pool_mib, 256, "Bytes of matrix copies cycled through");
ABSL_FLAG(double, min_seconds, 0.3, "Time spent per cell");
ABSL_FLAG(std::string, path, "auto",
          "auto (what LinearTyped picks on this CPU), avx2 (the paths of CPUs without AVX-512, "
          "run here: f32 on linear.cc's kernel, quantised weights on the AVX2 integer path), "
          "avx2-f32 (every type "
          "dequantised to f32, the AVX2 path for quantised weights before the integer one), "
          "f32fma (every type dequantised to f32 on AVX-512: what AVX-512 CPUs without BF16 or "
          "VNNI run for bf16 and quantised weights) or portable");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> Ints(absl::string_view flag, const std::string& text) {
  absl::StatusOr<std::vector<int>> v = ParsePositiveInts(flag, text);
  if (!v.ok()) {
    std::fprintf(stderr, "linear_bench: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return *v;
}

bool ParseType(absl::string_view name, DType* out) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                  DType::kQ4_1, DType::kQ4_K, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ5_K, DType::kQ6_K}) {
    if (name == DTypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

// Random weights with finite scales: every 16-bit word an f16 of magnitude
// below 1 (the quantised types' scales sit at even offsets), other bytes random.
std::vector<uint8_t> RandomBytes(size_t n, std::mt19937* rng) {
  std::vector<uint8_t> w(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<uint8_t>(byte(*rng));
  for (size_t i = 1; i < n; i += 2) w[i] &= 0x37;  // f16 exponent < 15: |v| < 1
  return w;
}

int Main() {
  const std::vector<int> rows = Ints("rows", absl::GetFlag(FLAGS_rows));
  using Kernel = void (*)(const float*, const void*, DType, int, int, int, float*, int);
  const std::string path = absl::GetFlag(FLAGS_path);
  Kernel kernel = &cpu::LinearTyped;
  if (path == "avx2" || path == "avx2-f32") {
    if (!cpu::LinearTypedAvx2HasSimd()) {
      std::fprintf(stderr, "linear_bench: --path %s: this CPU has no AVX2, FMA and F16C\n",
                   path.c_str());
      return 1;
    }
    kernel = &cpu::LinearTypedAvx2;
    if (path == "avx2") {
      kernel = [](const float* x, const void* w, DType t, int T, int K, int N, float* out,
                  int threads) {
        if (cpu::LinearIntTakes(t)) {
          cpu::LinearIntAvx2(x, w, t, T, K, N, out, threads);
        } else if (t == DType::kF32) {
          // LinearTyped's f32 path on those CPUs (linear.cc).
          cpu::Linear(x, static_cast<const float*>(w), T, K, N, out, threads);
        } else {
          cpu::LinearTypedAvx2(x, w, t, T, K, N, out, threads);
        }
      };
    }
  } else if (path == "f32fma") {
    if (!cpu::LinearTypedHasSimd(DType::kF32)) {
      std::fprintf(stderr, "linear_bench: --path f32fma: this CPU has no AVX-512\n");
      return 1;
    }
    kernel = &cpu::LinearTypedF32Fma;
  } else if (path == "portable") {
    kernel = &cpu::LinearTypedPortable;
  } else if (path != "auto") {
    std::fprintf(stderr,
                 "linear_bench: --path '%s' is not auto, avx2, avx2-f32, f32fma or portable\n",
                 path.c_str());
    return 1;
  }
  const std::vector<int> threads = Ints("threads", absl::GetFlag(FLAGS_threads));
  const size_t pool = static_cast<size_t>(absl::GetFlag(FLAGS_pool_mib)) << 20;
  std::mt19937 rng(1);
  std::printf("%-10s %-6s %4s %7s %12s %10s %8s\n", "shape", "type", "T", "threads", "us/product",
              "GB/s", "speedup");
  for (absl::string_view shape : absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',')) {
    std::vector<std::string> nk = absl::StrSplit(shape, 'x');
    int N = 0, K = 0;
    if (nk.size() != 2 || !absl::SimpleAtoi(nk[0], &N) || !absl::SimpleAtoi(nk[1], &K)) {
      std::fprintf(stderr, "linear_bench: bad shape '%s'\n", std::string(shape).c_str());
      return 1;
    }
    for (absl::string_view tn : absl::StrSplit(absl::GetFlag(FLAGS_types), ',')) {
      DType type;
      if (!ParseType(tn, &type)) {
        std::fprintf(stderr, "linear_bench: unknown type '%s'\n", std::string(tn).c_str());
        return 1;
      }
      if (K % DTypeBlockSize(type) != 0) continue;
      const size_t bytes = DTypeBytes(type, static_cast<int64_t>(N) * K);
      const size_t copies = std::max<size_t>(2, pool / bytes);
      const std::vector<uint8_t> one = RandomBytes(bytes, &rng);
      std::vector<uint8_t> w(bytes * copies);
      for (size_t c = 0; c < copies; ++c) std::memcpy(w.data() + c * bytes, one.data(), bytes);
      for (int T : rows) {
        std::vector<float> x(static_cast<size_t>(T) * K), out(static_cast<size_t>(T) * N);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(rng);
        double first = 0;
        for (int th : threads) {
          size_t c = 0;
          int64_t calls = 0;
          const Clock::time_point t0 = Clock::now();
          double secs = 0;
          while (secs < absl::GetFlag(FLAGS_min_seconds)) {
            for (int i = 0; i < 16; ++i, ++calls, c = (c + 1) % copies) {
              kernel(x.data(), w.data() + c * bytes, type, T, K, N, out.data(), th);
            }
            secs = std::chrono::duration<double>(Clock::now() - t0).count();
          }
          const double us = secs / calls * 1e6;
          if (first == 0) first = us;
          std::printf("%-10s %-6s %4d %7d %12.1f %10.1f %7.2fx\n", std::string(shape).c_str(),
                      DTypeName(type), T, th, us, bytes / (us * 1e-6) / 1e9, first / us);
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
