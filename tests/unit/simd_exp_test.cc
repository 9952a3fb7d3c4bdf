// The AVX-512 elementary functions of kernels/cpu/simd_exp.h against the
// C library in double precision, over the ranges their kernels feed them
// (skipped, saying so, on a CPU without AVX-512):
//  - ExpNonPositive for x in [-110, 0] (softmax, SSM decays; 0 below ~-104);
//  - Log1pUnit for y in [0, 1], tiny y included (1 + y rounds to 1);
//  - Softplus for x in [-40, 40], the threshold at 20 and denormal results
//    included (Mamba's dt);
//  - Silu for x in [-40, 40].
#include "kernels/cpu/simd_exp.h"

#include <cmath>
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512
// intrinsic headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace treespec::cpu {
namespace {

enum class Fn { kExp, kLog1p, kSoftplus, kSilu };

// Sixteen values through one of the functions.
__attribute__((target("avx512f"))) void Apply16(Fn fn, const float* in, float* out) {
  const __m512 x = _mm512_loadu_ps(in);
  __m512 y = x;
  switch (fn) {
    case Fn::kExp: y = ExpNonPositive(x); break;
    case Fn::kLog1p: y = Log1pUnit(x); break;
    case Fn::kSoftplus: y = Softplus(x); break;
    case Fn::kSilu: y = Silu(x); break;
  }
  _mm512_storeu_ps(out, y);
}

// The largest error of fn against ref over xs, relative to max(|ref|, floor).
double MaxError(Fn fn, double (*ref)(double), const std::vector<float>& xs, double floor) {
  double worst = 0;
  for (size_t i = 0; i < xs.size(); i += 16) {
    float in[16], out[16];
    for (size_t j = 0; j < 16; ++j) in[j] = xs[std::min(i + j, xs.size() - 1)];
    Apply16(fn, in, out);
    for (int j = 0; j < 16; ++j) {
      const double want = ref(in[j]);
      worst = std::max(worst, std::abs(out[j] - want) / std::max(std::abs(want), floor));
    }
  }
  return worst;
}

std::vector<float> Range(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / n);
  return v;
}

double RefSoftplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double RefSilu(double x) { return x / (1.0 + std::exp(-x)); }
double RefLog1p(double y) { return std::log1p(y); }
double RefExp(double x) { return std::exp(x); }

class SimdExpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveAvx512F()) GTEST_SKIP() << "this CPU has no AVX-512F: the functions are not used";
  }
};

TEST_F(SimdExpTest, ExpOfNonPositiveArguments) {
  std::vector<float> xs = Range(-110.0f, 0.0f, 20000);
  EXPECT_LT(MaxError(Fn::kExp, RefExp, Range(-80.0f, 0.0f, 20000), 0), 3e-7);
  // Far below: 0 or denormals, within 1e-38 · 3e-7 of the truth.
  EXPECT_LT(MaxError(Fn::kExp, RefExp, xs, 1e-38), 3e-7);
}

TEST_F(SimdExpTest, Log1pOfTheUnitInterval) {
  std::vector<float> ys = Range(0.0f, 1.0f, 20000);
  for (float y : {1e-30f, 1e-10f, 3e-8f, 6e-8f, 1e-7f, 1e-5f, 1e-3f}) ys.push_back(y);
  EXPECT_LT(MaxError(Fn::kLog1p, RefLog1p, ys, 0), 3e-7);
}

TEST_F(SimdExpTest, SoftplusMatchesTorchsDefinitionEverywhere) {
  std::vector<float> xs = Range(-40.0f, 40.0f, 40000);
  for (float x : {19.999f, 20.0f, 20.001f, -87.0f, -100.0f}) xs.push_back(x);
  // Below about -87 softplus(x) ~ exp(x) is a float denormal, exact only to
  // ~1.4e-45: there the error is taken against 1e-37.
  EXPECT_LT(MaxError(Fn::kSoftplus, RefSoftplus, xs, 1e-37), 5e-7);
}

TEST_F(SimdExpTest, SiluForBothSigns) {
  EXPECT_LT(MaxError(Fn::kSilu, RefSilu, Range(-40.0f, 40.0f, 40000), 1e-30), 5e-7);
}

}  // namespace
}  // namespace treespec::cpu
