// LinearTyped (kernels/cpu/linear_typed.cc, linear_int.cc): f32, f16, bf16,
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weight matrices against the
// f64 product with the
// dequantised matrix, and batch invariance — a row computed alone equals the
// same row inside a batch, and 1 thread equals 2, bit for bit — on each path
// this CPU has: the integer path (AVX-512 VNNI; its reference uses the
// activations as it rounds them, and a looser bound the true activations),
// the bf16 path (AVX-512 BF16), the f32-FMA AVX-512 path, the f32-FMA AVX2
// path (CPUs without AVX-512; also run on those with it), and the portable
// path. The scalar decoders the references use (quant_blocks.h) against the
// GGUF dequantiser, which its own tests check against the gguf library's
// blocks. Also the CPU backend's weight-type spec.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/model/gguf_dequant.h"
#include "core/tensor/backend.h"
#include "core/tensor/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_int.h"
#include "kernels/cpu/quant_blocks.h"

namespace treespec {
namespace {

using Kernel = void (*)(const float*, const void*, DType, int, int, int, float*, int);

// A random [N, K] matrix of `type`: plausible scales, every code used.
std::vector<uint8_t> RandomMatrix(DType type, int N, int K, std::mt19937* rng) {
  std::vector<uint8_t> w(DTypeBytes(type, static_cast<int64_t>(N) * K));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  if (type == DType::kF32) {
    float* p = reinterpret_cast<float*>(w.data());
    for (int64_t i = 0; i < static_cast<int64_t>(N) * K; ++i) p[i] = 0.1f * u(*rng);
    return w;
  }
  if (type == DType::kF16 || type == DType::kBF16) {
    uint16_t* p = reinterpret_cast<uint16_t*>(w.data());
    for (int64_t i = 0; i < static_cast<int64_t>(N) * K; ++i) {
      p[i] = type == DType::kF16 ? FloatToHalf(0.1f * u(*rng)) : FloatToBF16(0.1f * u(*rng));
    }
    return w;
  }
  const size_t bb = DTypeBytes(type, DTypeBlockSize(type));
  for (size_t b = 0; b < w.size() / bb; ++b) {
    uint8_t* blk = w.data() + b * bb;
    for (size_t j = 0; j < bb; ++j) blk[j] = static_cast<uint8_t>(byte(*rng));
    if (type == DType::kQ4_K || type == DType::kQ5_K) {
      // d and dmin; the 6-bit scales and mins (random bytes) multiply them by up to 63.
      const uint16_t d = FloatToHalf(0.0002f + 0.0002f * std::fabs(u(*rng)));
      const uint16_t dmin = FloatToHalf(0.001f * std::fabs(u(*rng)));
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
      continue;
    }
    if (type == DType::kQ6_K) {
      // d at the end; the int8 scales (random bytes) and codes − 32 multiply it by up to 4096.
      const uint16_t d = FloatToHalf(0.00002f + 0.00002f * std::fabs(u(*rng)));
      std::memcpy(blk + 208, &d, 2);
      continue;
    }
    const uint16_t d = FloatToHalf(0.002f + 0.01f * std::fabs(u(*rng)));
    std::memcpy(blk, &d, 2);
    if (type == DType::kQ4_1 || type == DType::kQ5_1) {
      const uint16_t m = FloatToHalf(-0.05f * std::fabs(u(*rng)));
      std::memcpy(blk + 2, &m, 2);
    }
  }
  return w;
}

struct Case {
  DType type;
  int K;
};

// K = 100 gives the 16-bit paths a masked tail (K = 8: a row shorter than
// the bf16 path's 32-element chunk); quantised rows are whole
// blocks: 96 and 160 end in a short group of the integer path (3 and 1 of 4
// blocks), 128 and 256 do not; Q4_K rows are whole 256-element blocks.
const Case kCases[] = {{DType::kF32, 100},  {DType::kF32, 256},  {DType::kF16, 100},
                       {DType::kBF16, 100}, {DType::kBF16, 256}, {DType::kBF16, 8},
                       {DType::kF16, 256},  {DType::kQ8_0, 96},
                       {DType::kQ4_0, 96},  {DType::kQ4_1, 160}, {DType::kQ8_0, 256},
                       {DType::kQ4_0, 128}, {DType::kQ4_1, 64},  {DType::kQ8_0, 576},
                       {DType::kQ4_K, 256}, {DType::kQ4_K, 768}, {DType::kQ5_0, 96},
                       {DType::kQ5_0, 256}, {DType::kQ5_1, 160}, {DType::kQ5_1, 576},
                       {DType::kQ6_K, 256}, {DType::kQ6_K, 768}, {DType::kQ5_K, 256},
                       {DType::kQ5_K, 768}};

// The activations as the integer path sees them (x̂ = d·q per block), and the
// largest rounding error of each element: d/2, plus 0.01·d for the f32
// rounding of x·(32767 / max|x|) and of d (each < 0.004 codes at 32767).
void RoundLikeIntPath(const std::vector<float>& x, int K, std::vector<double>* xq,
                      std::vector<double>* half_step) {
  xq->resize(x.size());
  half_step->resize(x.size());
  int16_t q[32];
  float d;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    if (cpu::LinearIntHasSimd()) {
      cpu::QuantiseBlockI16(x.data() + 32 * b, q, &d);
    } else {
      cpu::QuantiseBlockI16Avx2(x.data() + 32 * b, q, &d);
    }
    for (int e = 0; e < 32; ++e) {
      (*xq)[32 * b + e] = static_cast<double>(d) * q[e];
      (*half_step)[32 * b + e] = 0.51 * d;
    }
  }
}

// Checks `kernel` on every case of a type in `only` (all if empty); with
// `int_path`, against the product with the activations rounded as that path
// rounds them. `x_rel` bounds the relative error of a path that represents
// each activation inexactly but without a per-block scale (the bf16 path).
void CheckKernel(Kernel kernel, const char* path, bool int_path = false,
                 std::vector<DType> only = {}, double x_rel = 0) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& c : kCases) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.type) == only.end()) continue;
    SCOPED_TRACE(std::string(path) + " " + DTypeName(c.type) + " K=" + std::to_string(c.K));
    // N = 1100 columns so that 2 threads really split the product.
    const int T = 9, N = 1100, K = c.K;
    std::vector<uint8_t> w = RandomMatrix(c.type, N, K, &rng);
    std::vector<float> x(static_cast<size_t>(T) * K);
    for (float& v : x) v = u(rng);
    x[3] = 0;  // a zero and a large element: the rounding scales differ per block
    x[K + 5] = 40.0f;
    std::vector<double> xq(x.begin(), x.end()), half_step(x.size(), 0.0);
    if (int_path) RoundLikeIntPath(x, K, &xq, &half_step);
    std::vector<float> batch(static_cast<size_t>(T) * N), two(batch.size());
    kernel(x.data(), w.data(), c.type, T, K, N, batch.data(), 1);
    kernel(x.data(), w.data(), c.type, T, K, N, two.data(), 2);
    EXPECT_EQ(0, std::memcmp(batch.data(), two.data(), batch.size() * sizeof(float)))
        << "2 threads differ from 1";
    std::vector<float> row(K), alone(N);
    double worst = 0, worst_true = 0;
    for (int t = 0; t < T; ++t) {
      kernel(x.data() + static_cast<size_t>(t) * K, w.data(), c.type, 1, K, N, alone.data(), 1);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + static_cast<size_t>(t) * N,
                               N * sizeof(float)))
          << "row " << t << " alone differs from the same row in a batch of " << T;
      for (int n = 0; n < N; ++n) {
        cpu::DecodeRow(c.type, w.data(), n, K, row.data());
        double ref = 0, ref_true = 0, mag = 0, rounding = 0, split = 0;
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(t) * K + k;
          ref += xq[i] * row[k];
          ref_true += static_cast<double>(x[i]) * row[k];
          mag += std::fabs(xq[i] * row[k]);
          split += x_rel * std::fabs(xq[i] * row[k]);
          rounding += half_step[i] * std::fabs(row[k]);
        }
        // f32 accumulation of K products: a few ulps of the magnitude sum.
        const double got = batch[static_cast<size_t>(t) * N + n];
        const double err = std::fabs(got - ref), err_true = std::fabs(got - ref_true);
        worst = std::max(worst, err / (mag + 1e-30));
        worst_true = std::max(worst_true, err_true / (mag + 1e-30));
        ASSERT_LE(err, 1e-6 * K * mag + split + 1e-30) << "t " << t << " n " << n;
        // Against the true activations: also the activations' rounding.
        ASSERT_LE(err_true, 1e-6 * K * mag + split + rounding + 1e-30) << "t " << t << " n " << n;
      }
    }
    std::printf("[linear_typed] %s %s K=%d: worst error / sum|x*w| = %.3g (true x: %.3g)\n",
                path, DTypeName(c.type), K, worst, worst_true);
  }
}

TEST(LinearTypedTest, SimdPathMatchesDequantisedF32AndIsBatchInvariant) {
  if (!cpu::LinearTypedHasSimd(DType::kF16)) {
    GTEST_SKIP() << "no AVX-512 on this CPU (f32 then takes linear.cc's AVX2 kernel)";
  }
  CheckKernel(&cpu::LinearTypedF32Fma, "avx512-f32fma");
}

TEST(LinearTypedTest, Avx2PathMatchesDequantisedF32AndIsBatchInvariant) {
  if (!cpu::LinearTypedAvx2HasSimd()) GTEST_SKIP() << "no AVX2, FMA and F16C on this CPU";
  CheckKernel(&cpu::LinearTypedAvx2, "avx2-f32fma");
}

// What LinearTyped picks for f32 weights on this CPU: the AVX-512 kernel, or
// under TREESPEC_CPU_ISA=avx2 (the CpuIsa.avx2 run of this executable)
// linear.cc's AVX2 kernel and its 4 x 3 tiles, or the portable loop.
TEST(LinearTypedTest, DispatchedF32MatchesAndIsBatchInvariant) {
  CheckKernel(&cpu::LinearTyped, "dispatched", false, {DType::kF32});
}

TEST(LinearTypedTest, PortablePathMatchesDequantisedF32AndIsBatchInvariant) {
  CheckKernel(&cpu::LinearTypedPortable, "portable");
}

TEST(LinearTypedTest, IntPathMatchesRoundedActivationsAndIsBatchInvariant) {
  if (!cpu::LinearIntHasSimd()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const std::vector<DType> quantised = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                                       DType::kQ5_0, DType::kQ5_1, DType::kQ5_K, DType::kQ6_K};
  CheckKernel(&cpu::LinearInt, "int", /*int_path=*/true, quantised);
  // LinearTyped dispatches quantised weights here.
  CheckKernel(&cpu::LinearTyped, "dispatch", /*int_path=*/true, quantised);
}

// The AVX2 integer path (CPUs without AVX-512; run on those with it too): the
// same activation rounding, so the same reference and bounds.
TEST(LinearTypedTest, Avx2IntPathMatchesRoundedActivationsAndIsBatchInvariant) {
  if (!cpu::LinearIntAvx2HasSimd()) GTEST_SKIP() << "no AVX2, FMA and F16C on this CPU";
  const std::vector<DType> quantised = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                                       DType::kQ5_0, DType::kQ5_1, DType::kQ5_K, DType::kQ6_K};
  CheckKernel(&cpu::LinearIntAvx2, "int-avx2", /*int_path=*/true, quantised);
  // Without AVX-512, LinearTyped dispatches quantised weights here.
  if (!cpu::LinearTypedHasSimd(DType::kQ8_0)) {
    CheckKernel(&cpu::LinearTyped, "dispatch", /*int_path=*/true, quantised);
  }
}

// A prompt's activation rows are rounded on every thread of the call (each
// row into the calling thread's scratch); the product equals one thread's.
TEST(LinearTypedTest, IntPathsRoundAPromptsRowsOnEveryThread) {
  std::vector<std::pair<const char*, Kernel>> kernels;
  if (cpu::LinearIntHasSimd()) kernels.push_back({"int", &cpu::LinearInt});
  if (cpu::LinearIntAvx2HasSimd()) kernels.push_back({"int-avx2", &cpu::LinearIntAvx2});
  if (kernels.empty()) GTEST_SKIP() << "no integer path on this CPU";
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int T = 256, K = 2048, N = 64;
  const std::vector<uint8_t> w = RandomMatrix(DType::kQ4_1, N, K, &rng);
  std::vector<float> x(static_cast<size_t>(T) * K);
  for (float& v : x) v = u(rng);
  for (const auto& [name, kernel] : kernels) {
    SCOPED_TRACE(name);
    std::vector<float> one(static_cast<size_t>(T) * N), two(one.size());
    kernel(x.data(), w.data(), DType::kQ4_1, T, K, N, one.data(), 1);
    for (int rep = 0; rep < 20; ++rep) {
      kernel(x.data(), w.data(), DType::kQ4_1, T, K, N, two.data(), 2);
      ASSERT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << rep;
    }
  }
}

// Both integer paths round a block of activations to the same codes and scale.
TEST(LinearTypedTest, Avx2AndAvx512RoundActivationsAlike) {
  if (!cpu::LinearIntHasSimd() || !cpu::LinearIntAvx2HasSimd()) {
    GTEST_SKIP() << "needs both AVX-512 VNNI and AVX2 on this CPU";
  }
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int trial = 0; trial < 500; ++trial) {
    float x[32];
    for (float& v : x) v = trial == 0 ? 0.0f : u(rng);
    if (trial % 5 == 1) x[trial % 32] = -1e4f;
    if (trial % 5 == 2) x[trial % 32] = 1e-30f * u(rng);
    int16_t q512[32], q2[32];
    float d512, d2;
    cpu::QuantiseBlockI16(x, q512, &d512);
    cpu::QuantiseBlockI16Avx2(x, q2, &d2);
    ASSERT_EQ(d512, d2) << "trial " << trial;
    ASSERT_EQ(0, std::memcmp(q512, q2, sizeof(q2))) << "trial " << trial;
  }
}

// The bf16 path splits x into two bf16 parts: |x − hi − lo| ≤ 2^-16·|x| on
// top of the f32 accumulation's error.
TEST(LinearTypedTest, Bf16PathMatchesDequantisedF32AndIsBatchInvariant) {
  if (!cpu::LinearBf16HasSimd()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  Kernel bf16 = [](const float* x, const void* w, DType type, int T, int K, int N, float* out,
                   int threads) {
    ASSERT_EQ(type, DType::kBF16);
    cpu::LinearBf16(x, w, T, K, N, out, threads);
  };
  CheckKernel(bf16, "bf16", /*int_path=*/false, {DType::kBF16}, std::ldexp(1.0, -16));
  CheckKernel(&cpu::LinearTyped, "dispatch", /*int_path=*/false, {DType::kBF16},
              std::ldexp(1.0, -16));
}

TEST(LinearTypedTest, QuantiseBlockI16RoundsToNearestOfFullScale) {
  if (!cpu::LinearIntHasSimd()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    float x[32];
    for (float& v : x) v = trial == 0 ? 0.0f : u(rng);
    if (trial % 7 == 1) x[trial % 32] = -1e4f;
    int16_t q[32];
    float d;
    cpu::QuantiseBlockI16(x, q, &d);
    float amax = 0;
    int qmax = 0;
    for (int e = 0; e < 32; ++e) {
      amax = std::max(amax, std::fabs(x[e]));
      qmax = std::max(qmax, std::abs(static_cast<int>(q[e])));
      // Half a step, plus the f32 rounding of x·(32767 / max|x|) and of d.
      ASSERT_LE(std::fabs(x[e] - static_cast<double>(d) * q[e]), 0.51 * d + 1e-30)
          << "trial " << trial << " element " << e << " x " << x[e] << " q " << q[e];
    }
    EXPECT_EQ(d, amax / 32767.0f) << "trial " << trial;
    EXPECT_EQ(qmax, trial == 0 ? 0 : 32767) << "trial " << trial;
  }
}

// Under TREESPEC_CPU_ISA (the CpuIsa.* runs of this executable,
// tests/CMakeLists.txt) the wider paths are off, so those runs test the
// narrower ones; without it, nothing to check.
TEST(CpuIsaTest, CapTurnsTheWiderPathsOff) {
  const char* isa = std::getenv("TREESPEC_CPU_ISA");
  if (isa == nullptr) GTEST_SKIP() << "TREESPEC_CPU_ISA is not set";
  const std::string cap = isa;
  if (cap != "avx2" && cap != "portable") GTEST_SKIP() << "TREESPEC_CPU_ISA=" << cap;
  EXPECT_FALSE(cpu::LinearTypedHasSimd(DType::kQ8_0));
  EXPECT_FALSE(cpu::LinearIntHasSimd());
  EXPECT_FALSE(cpu::LinearBf16HasSimd());
  if (cap == "portable") {
    EXPECT_FALSE(cpu::LinearTypedAvx2HasSimd());
    EXPECT_FALSE(cpu::LinearIntAvx2HasSimd());
  }
}

TEST(LinearTypedTest, DecodeBlockMatchesTheGgmlFormulas) {
  // One hand-made Q4_1 block: d = 0.5, m = -1, nibbles 0..15 low, 15..0 high.
  uint8_t b[20];
  const uint16_t d = FloatToHalf(0.5f), m = FloatToHalf(-1.0f);
  std::memcpy(b, &d, 2);
  std::memcpy(b + 2, &m, 2);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  cpu::DecodeBlock(DType::kQ4_1, b, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 1.0f);
    EXPECT_EQ(out[16 + j], 0.5f * (15 - j) - 1.0f);
  }
}

TEST(LinearTypedTest, DecodeBlockPlacesQ5FifthBits) {
  // Hand-made Q5_0 / Q5_1 blocks: d = 0.5 (Q5_1: m = -1), nibbles 0..15 low
  // and 15..0 high, fifth bits set on the even elements below 16 and on
  // elements 16..23 (qh = 0x00ff5555).
  for (const bool min : {false, true}) {
    uint8_t b[24] = {};
    const uint16_t d = FloatToHalf(0.5f), m = FloatToHalf(-1.0f);
    std::memcpy(b, &d, 2);
    if (min) std::memcpy(b + 2, &m, 2);
    const uint32_t qh = 0x00ff5555u;
    std::memcpy(b + (min ? 4 : 2), &qh, 4);
    for (int j = 0; j < 16; ++j) b[(min ? 8 : 6) + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float out[32];
    cpu::DecodeBlock(min ? DType::kQ5_1 : DType::kQ5_0, b, out);
    for (int j = 0; j < 16; ++j) {
      const int lo = j + (j % 2 == 0 ? 16 : 0), hi = (15 - j) + (j < 8 ? 16 : 0);
      EXPECT_EQ(out[j], min ? 0.5f * lo - 1.0f : 0.5f * (lo - 16)) << min << " " << j;
      EXPECT_EQ(out[16 + j], min ? 0.5f * hi - 1.0f : 0.5f * (hi - 16)) << min << " " << 16 + j;
    }
  }
}

// The scalar decoders every path's reference uses equal the GGUF dequantiser.
TEST(LinearTypedTest, DecodeRowEqualsTheGgufDequantiser) {
  std::mt19937 rng(5);
  struct Type {
    DType dtype;
    GgmlType ggml;
  };
  for (const Type& t : {Type{DType::kQ8_0, GgmlType::kQ8_0}, Type{DType::kQ4_0, GgmlType::kQ4_0},
                        Type{DType::kQ4_1, GgmlType::kQ4_1}, Type{DType::kQ4_K, GgmlType::kQ4_K},
                        Type{DType::kQ5_0, GgmlType::kQ5_0}, Type{DType::kQ5_1, GgmlType::kQ5_1},
                        Type{DType::kQ5_K, GgmlType::kQ5_K}, Type{DType::kQ6_K, GgmlType::kQ6_K}}) {
    const int N = 3, K = 512;
    std::vector<uint8_t> w = RandomMatrix(t.dtype, N, K, &rng);
    std::vector<float> want(static_cast<size_t>(N) * K), row(K);
    ASSERT_TRUE(DequantizeGgml(t.ggml, w.data(), N * K, want.data()).ok());
    for (int n = 0; n < N; ++n) {
      cpu::DecodeRow(t.dtype, w.data(), n, K, row.data());
      EXPECT_EQ(0, std::memcmp(row.data(), want.data() + n * K, K * sizeof(float)))
          << DTypeName(t.dtype) << " row " << n;
    }
  }
}

TEST(CpuWeightsTest, SpecSelectsWeightStorage) {
  struct Want {
    const char* spec;
    DType from_f32, from_q4_1;
  };
  for (const Want& w : {Want{"cpu", DType::kF32, DType::kF32},
                        Want{"cpu:2:f16", DType::kF16, DType::kF16},
                        Want{"cpu:1:bf16", DType::kBF16, DType::kBF16},
                        Want{"cpu:2:auto", DType::kF32, DType::kQ4_1}}) {
    auto be = CreateBackend(w.spec);
    ASSERT_TRUE(be.ok()) << w.spec << ": " << be.status();
    EXPECT_EQ((*be)->WeightDType(DType::kF32), w.from_f32) << w.spec;
    EXPECT_EQ((*be)->WeightDType(DType::kQ4_1), w.from_q4_1) << w.spec;
    for (DType kept : {DType::kQ4_K, DType::kQ5_0, DType::kQ5_1, DType::kQ5_K, DType::kQ6_K}) {
      EXPECT_EQ((*be)->WeightDType(kept), w.from_q4_1 == DType::kQ4_1 ? kept : w.from_q4_1)
          << w.spec << " " << DTypeName(kept);
    }
    EXPECT_EQ((*be)->activation_dtype(), DType::kF32) << w.spec;
  }
  for (const char* bad : {"cpu:2:q4", "cpu:0", "cpu:2:f16:3", "cpu:x"}) {
    auto be = CreateBackend(bad);
    ASSERT_FALSE(be.ok()) << bad;
    EXPECT_EQ(be.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(be.status().message().find(bad), std::string::npos) << be.status();
  }
}

TEST(CpuWeightsTest, BackendLinearAndEmbeddingTakeQuantisedWeights) {
  auto be = CreateBackend("cpu:1:auto");
  ASSERT_TRUE(be.ok()) << be.status();
  std::mt19937 rng(3);
  for (DType type : {DType::kQ8_0, DType::kQ4_K, DType::kQ5_0, DType::kQ5_1, DType::kQ5_K,
                     DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(type));
    const int N = 40, K = 256, T = 3;
    std::vector<uint8_t> raw = RandomMatrix(type, N, K, &rng);
    auto w = (*be)->Alloc(type, {N, K});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_EQ(w->nbytes(), raw.size());
    ASSERT_TRUE((*be)->Upload(raw.data(), type, &*w).ok());
    // Embedding rows are the dequantised rows.
    auto ids = (*be)->Alloc(DType::kI32, {T});
    ASSERT_TRUE(ids.ok());
    const int32_t want_ids[T] = {5, 0, 39};
    std::memcpy(ids->raw(), want_ids, sizeof(want_ids));
    auto emb = (*be)->Alloc(DType::kF32, {T, K});
    ASSERT_TRUE(emb.ok());
    ASSERT_TRUE((*be)->Embedding(*ids, *w, &*emb).ok());
    std::vector<float> row(K);
    for (int t = 0; t < T; ++t) {
      cpu::DecodeRow(type, raw.data(), want_ids[t], K, row.data());
      EXPECT_EQ(0, std::memcmp(row.data(), emb->data<float>() + t * K, K * sizeof(float)));
    }
    // Uploading to f32 dequantises the same way.
    auto f32 = (*be)->Alloc(DType::kF32, {N, K});
    ASSERT_TRUE(f32.ok());
    ASSERT_TRUE((*be)->Upload(raw.data(), type, &*f32).ok());
    cpu::DecodeRow(type, raw.data(), 7, K, row.data());
    EXPECT_EQ(0, std::memcmp(row.data(), f32->data<float>() + 7 * K, K * sizeof(float)));
    // Linear through the backend = the kernel.
    auto out = (*be)->Alloc(DType::kF32, {T, N});
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE((*be)->Linear(*emb, *w, &*out).ok());
    std::vector<float> want(T * N);
    cpu::LinearTyped(emb->data<float>(), raw.data(), type, T, K, N, want.data());
    EXPECT_EQ(0, std::memcmp(want.data(), out->data<float>(), want.size() * sizeof(float)));
    // A quantised weight whose K is not whole blocks is refused, naming it.
    const int odd_k = DTypeBlockSize(type) == 256 ? 224 : 48;
    auto odd = (*be)->Alloc(DType::kF32, {2, odd_k});
    ASSERT_TRUE(odd.ok());
    Tensor bad(type, {N, odd_k}, DeviceKind::kCpu, nullptr, w->raw());
    absl::Status s = (*be)->Linear(*odd, bad, &*out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("linear weight"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace treespec
