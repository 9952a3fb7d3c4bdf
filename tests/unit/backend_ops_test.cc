// Every Backend op on every available backend against a plain double-precision
// loop written here (STYLE.md point 3; llama.cpp's test-backend-ops).
//
// Backends: "cpu" (f32) always; "cuda:f32", "cuda:f16", "cuda:bf16" when a GPU
// is present (otherwise those cases skip with "no CUDA device: <reason>").
// Inputs are random with fixed seeds and are read back from the backend after
// upload, so the reference sees exactly the rounded values the op sees; outputs
// are poisoned with NaN first, so an element the op never writes fails. A
// result passes when |a - ref| <= atol + rtol·|ref| with (atol, rtol) chosen
// per storage dtype: tight for f32, looser for f16, loosest for bf16.
//
// The Mamba-2 tree ops (SsmTreeConv, SsmTreeScan, GateSumSquares,
// GroupRmsScale) are tested the same way, on the same backends, with their
// batches in ssm_tree_ops_test.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/model/kv_cache.h"
#include "core/tensor/backend.h"
#include "gtest/gtest.h"
#ifdef TREESPEC_HAVE_CUDA_KERNELS
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/skinny_linear.h"
#endif

namespace treespec {
namespace {

struct Tol {
  double atol, rtol;
};

Tol TolFor(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {5e-5, 5e-5};
    case DType::kF16:
      return {2e-3, 4e-3};
    default:
      return {1.5e-2, 1.6e-2};
  }
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& spec) {
  if (spec == "cpu") return CreateBackend("cpu");
  if (spec == "cuda:f32") return CreateCudaBackend(0, DType::kF32);
  if (spec == "cuda:f16") return CreateBackend("cuda");
  return CreateBackend("cuda:bf16");
}

std::vector<float> Rand(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// x [T, K] · wᵀ (w [N, K]) in double.
std::vector<double> MatMulRef(const std::vector<double>& x, const std::vector<double>& w, int T,
                              int K, int N) {
  std::vector<double> out(static_cast<size_t>(T) * N);
  for (int t = 0; t < T; ++t) {
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += x[t * K + k] * w[n * K + k];
      out[t * N + n] = acc;
    }
  }
  return out;
}

// RmsNorm of x [T, D] with w [D] and eps 1e-5, in double.
std::vector<double> RmsNormRef(const std::vector<double>& x, const std::vector<double>& w, int T,
                               int D) {
  std::vector<double> out(static_cast<size_t>(T) * D);
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < D; ++i) ss += x[t * D + i] * x[t * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int i = 0; i < D; ++i) out[t * D + i] = w[i] * x[t * D + i] * inv;
  }
  return out;
}

class BackendOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto b = MakeBackend(GetParam());
    if (!b.ok()) {
      if (GetParam() == "cpu") FAIL() << b.status();
      const std::string why(b.status().message());
      GTEST_SKIP() << (absl::StartsWith(why, "no CUDA device") ? "" : "no CUDA device: ") << why;
    }
    be_ = std::move(*b);
    dtype_ = be_->activation_dtype();
    tol_ = TolFor(dtype_);
  }

  // A tensor of `dtype` (default: the activation dtype) holding `values`.
  Tensor Make(const std::vector<float>& values, Shape shape) {
    return MakeAs(values, std::move(shape), dtype_);
  }
  Tensor MakeAs(const std::vector<float>& values, Shape shape, DType dtype) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), Numel(shape));
    auto t = be_->Alloc(dtype, std::move(shape));
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(be_->Upload(values.data(), DType::kF32, &*t).ok());
    return *t;
  }
  Tensor MakeI32(const std::vector<int32_t>& values) {
    auto t = be_->Alloc(DType::kI32, {static_cast<int64_t>(values.size())});
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(be_->Upload(values.data(), DType::kI32, &*t).ok());
    return *t;
  }
  // An output tensor filled with NaN.
  Tensor Out(Shape shape, DType dtype) {
    std::vector<float> nan(Numel(shape), std::nanf(""));
    return MakeAs(nan, std::move(shape), dtype);
  }
  Tensor Out(Shape shape) { return Out(std::move(shape), dtype_); }
  void Poison(Tensor* t) {
    std::vector<float> nan(t->numel(), std::nanf(""));
    ASSERT_TRUE(be_->Upload(nan.data(), DType::kF32, t).ok());
  }
  std::vector<double> Get(const Tensor& t) {
    std::vector<float> f(t.numel());
    absl::Status s = be_->DownloadF32(t, f.data());
    EXPECT_TRUE(s.ok()) << s;
    return std::vector<double>(f.begin(), f.end());
  }

  void ExpectClose(const Tensor& got, const std::vector<double>& ref, const std::string& what,
                   Tol tol) {
    std::vector<double> a = Get(got);
    ASSERT_EQ(a.size(), ref.size()) << what;
    int failures = 0;
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double err = std::fabs(a[i] - ref[i]);
      const double bound = tol.atol + tol.rtol * std::fabs(ref[i]);
      if (!(err <= bound)) {
        if (++failures <= 5) {
          ADD_FAILURE() << what << " [" << GetParam() << "] element " << i << ": got " << a[i]
                        << ", want " << ref[i] << " (|err| " << err << " > " << bound << ")";
        }
      }
      if (std::isfinite(err)) worst = std::max(worst, err / bound);
    }
    EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << a.size()
                           << " elements out of tolerance";
  }
  void ExpectClose(const Tensor& got, const std::vector<double>& ref, const std::string& what) {
    ExpectClose(got, ref, what, tol_);
  }

  std::unique_ptr<Backend> be_;
  DType dtype_ = DType::kF32;
  Tol tol_{};
};

// Value `v` rounded to `dtype` as the backends store it.
double Round(float v, DType dtype) {
  if (dtype == DType::kF16) return HalfToFloat(FloatToHalf(v));
  if (dtype == DType::kBF16) return BF16ToFloat(FloatToBF16(v));
  return v;
}

// ---- memory ------------------------------------------------------------------

TEST_P(BackendOpsTest, UploadDownloadAndZero) {
  const std::vector<float> v = Rand(1000, 1, -3.0f, 3.0f);
  Tensor t = Make(v, {10, 100});
  std::vector<double> got = Get(t);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], Round(v[i], dtype_)) << "element " << i;

  std::vector<uint16_t> halves(v.size()), bf(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    halves[i] = FloatToHalf(v[i]);
    bf[i] = FloatToBF16(v[i]);
  }
  ASSERT_TRUE(be_->Upload(halves.data(), DType::kF16, &t).ok());
  got = Get(t);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(got[i], Round(HalfToFloat(halves[i]), dtype_)) << "f16 element " << i;
  }
  ASSERT_TRUE(be_->Upload(bf.data(), DType::kBF16, &t).ok());
  got = Get(t);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(got[i], Round(BF16ToFloat(bf[i]), dtype_)) << "bf16 element " << i;
  }

  std::vector<int32_t> ids = {7, -3, 1 << 20, 0};
  Tensor it = MakeI32(ids);
  got = Get(it);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[i], ids[i]);

  ASSERT_TRUE(be_->Zero(&t).ok());
  for (double x : Get(t)) ASSERT_EQ(x, 0.0);
  auto fresh = be_->Alloc(DType::kF32, {3, 77});
  ASSERT_TRUE(fresh.ok());
  for (double x : Get(*fresh)) ASSERT_EQ(x, 0.0);  // Alloc zero-initialises
}

TEST_P(BackendOpsTest, FillUniformIsTheSameFormulaEverywhere) {
  for (DType dtype : {dtype_, DType::kF32}) {
    Tensor t = Out({33, 65}, dtype);
    const uint64_t seed = 0x1234567890abcdefull;
    ASSERT_TRUE(be_->FillUniform(&t, seed, 0.05f).ok());
    std::vector<double> got = Get(t);
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(got[i], Round(FillUniformValue(seed, i, 0.05f), dtype)) << "element " << i;
      // Rounding to f16 / bf16 may carry a value just past the bound.
      ASSERT_LE(std::fabs(got[i]), Round(0.05, dtype));
    }
  }
}

TEST_P(BackendOpsTest, MemoryStatsCountLiveTensorsAndThePeak) {
  const BackendMemoryStats start = be_->memory_stats();
  be_->ResetPeakMemory();
  EXPECT_EQ(be_->memory_stats().peak_bytes, start.in_use_bytes);
  int64_t held = 0;
  {
    auto a = be_->Alloc(DType::kF32, {1000, 64});  // 256000 bytes
    ASSERT_TRUE(a.ok());
    Tensor view = a->Rows(10, 20);  // a view keeps the allocation counted
    auto b = be_->Alloc(DType::kF32, {16});
    ASSERT_TRUE(b.ok());
    held = be_->memory_stats().in_use_bytes - start.in_use_bytes;
    EXPECT_GE(held, 256000 + 64);
    EXPECT_LE(held, 2 * (256000 + 64) + 512);  // CUDA rounds up to size classes
    *a = Tensor();
    EXPECT_EQ(be_->memory_stats().in_use_bytes - start.in_use_bytes, held);
  }
  EXPECT_EQ(be_->memory_stats().in_use_bytes, start.in_use_bytes);
  EXPECT_EQ(be_->memory_stats().peak_bytes, start.in_use_bytes + held);
  be_->ResetPeakMemory();
  EXPECT_EQ(be_->memory_stats().peak_bytes, start.in_use_bytes);
}

// ---- dense ops -----------------------------------------------------------------

TEST_P(BackendOpsTest, Embedding) {
  const int V = 50, D = 40;
  Tensor table = Make(Rand(V * D, 2), {V, D});
  const std::vector<int32_t> ids = {3, 49, 0, 3, 17, 22, 8};
  Tensor out = Out({7, D});
  ASSERT_TRUE(be_->Embedding(MakeI32(ids), table, &out).ok());
  std::vector<double> tab = Get(table), ref;
  for (int32_t id : ids) ref.insert(ref.end(), tab.begin() + id * D, tab.begin() + (id + 1) * D);
  ExpectClose(out, ref, "embedding", {0, 0});
}

TEST_P(BackendOpsTest, RmsNormAlsoInPlace) {
  // On CUDA, rows of whole 16-byte vectors take the vector kernel with 1 (8,
  // 96), 2 (4096) or 4 (20000 in 16-bit storage) vectors a thread; 100 in
  // 16-bit storage and 20000 in f32 take the scalar one.
  for (int D : {8, 96, 100, 4096, 20000}) {
    const int T = 5;
    Tensor x = Make(Rand(T * D, 3, -2.0f, 2.0f), {T, D});
    Tensor w = Make(Rand(D, 4, 0.5f, 1.5f), {D});
    const std::vector<double> ref = RmsNormRef(Get(x), Get(w), T, D);
    Tensor out = Out({T, D});
    ASSERT_TRUE(be_->RmsNorm(x, w, 1e-5f, &out).ok());
    ExpectClose(out, ref, "rmsnorm D=" + std::to_string(D));
    ASSERT_TRUE(be_->RmsNorm(x, w, 1e-5f, &x).ok());
    ExpectClose(x, ref, "rmsnorm in place D=" + std::to_string(D));
  }
}

// The residual add and the norm after it in one op (a fused kernel on CUDA
// for rows of whole 16-byte vectors, Add then RmsNorm otherwise): the same
// values as the two ops, bit for bit, the norm's output also over r (as the
// Llama layer calls it), and near the double reference.
TEST_P(BackendOpsTest, AddRmsNormIsAddThenRmsNorm) {
  for (int D : {8, 96, 100, 4096, 20000}) {
    const std::string what = "add_rmsnorm D=" + std::to_string(D);
    const int T = 3;
    const std::vector<float> xv = Rand(T * D, 21, -2.0f, 2.0f), rv = Rand(T * D, 22, -2.0f, 2.0f);
    Tensor w = Make(Rand(D, 23, 0.5f, 1.5f), {D});
    // Two ops.
    Tensor x2 = Make(xv, {T, D}), r2 = Make(rv, {T, D}), out2 = Out({T, D});
    ASSERT_TRUE(be_->Add(x2, r2, &x2).ok()) << what;
    ASSERT_TRUE(be_->RmsNorm(x2, w, 1e-5f, &out2).ok()) << what;
    const std::vector<double> sum = Get(x2), norm = Get(out2);
    // One op, into its own out and over r.
    for (bool over_r : {false, true}) {
      Tensor x = Make(xv, {T, D}), r = Make(rv, {T, D}), out = Out({T, D});
      Tensor* dst = over_r ? &r : &out;
      ASSERT_TRUE(be_->AddRmsNorm(&x, r, w, 1e-5f, dst).ok()) << what;
      const std::vector<double> gx = Get(x), gout = Get(*dst);
      for (int i = 0; i < T * D; ++i) {
        ASSERT_EQ(gx[i], sum[i]) << what << " [" << GetParam() << "] x element " << i;
        ASSERT_EQ(gout[i], norm[i]) << what << " [" << GetParam() << "] out element " << i
                                    << (over_r ? " (out over r)" : "");
      }
    }
    ExpectClose(out2, RmsNormRef(sum, Get(w), T, D), what);
  }
  // x and out are both outputs (the sum and its norm): one buffer cannot be both.
  Tensor x = Make(Rand(2 * 64, 24), {2, 64}), r = Make(Rand(2 * 64, 25), {2, 64});
  Tensor w = Make(Rand(64, 26, 0.5f, 1.5f), {64});
  EXPECT_EQ(be_->AddRmsNorm(&x, r, w, 1e-5f, &x).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendOpsTest, Linear) {
  struct Case {
    int T, K, N;
  };
  // K = 100: rows not of whole 16-byte vectors in 16-bit storage (cuBLAS there).
  for (Case c : {Case{1, 96, 80}, Case{5, 96, 80}, Case{33, 64, 48}, Case{3, 1024, 64},
                 Case{3, 100, 10}}) {
    const float s = 1.0f / std::sqrt(static_cast<float>(c.K));
    Tensor x = Make(Rand(c.T * c.K, 5 + c.T), {c.T, c.K});
    Tensor w = Make(Rand(c.N * c.K, 6 + c.K, -s, s), {c.N, c.K});
    const std::vector<double> ref = MatMulRef(Get(x), Get(w), c.T, c.K, c.N);
    Tensor out = Out({c.T, c.N});
    ASSERT_TRUE(be_->Linear(x, w, &out).ok());
    ExpectClose(out, ref, "linear T=" + std::to_string(c.T) + " K=" + std::to_string(c.K));
  }
}

// Decode and short verify steps: few rows, K past the few-row kernel's
// unrolled loop with a remainder, N odd (a warp's second weight row past the
// end). On CUDA once on the few-row kernel (kernels/cuda/skinny_linear.h) for
// every row count here, once on cuBLAS. The CPU and the few-row kernel are
// batch invariant: each row computed alone is bitwise the same as within the
// batch (greedy speculation compares a verify step's logits with plain
// decoding's). cuBLAS makes no such promise, so there only the values count.
TEST_P(BackendOpsTest, LinearFewRowsMatchesAndIsBatchInvariant) {
  struct Case {
    int T, K, N;
  };
  std::vector<int> modes = {-1};  // the CPU: as it is
#ifdef TREESPEC_HAVE_CUDA_KERNELS
  const int shipped = cuda::SetSkinnyMaxRows(be_.get(), 0);
  if (shipped >= 0) modes = {cuda::kSkinnyMaxRows, 0};
#endif
  for (int mode : modes) {
#ifdef TREESPEC_HAVE_CUDA_KERNELS
    if (mode >= 0) cuda::SetSkinnyMaxRows(be_.get(), mode);
#endif
    const bool invariant = mode != 0;
    for (Case c : {Case{8, 1000, 77}, Case{7, 4096, 130}, Case{2, 8, 3}, Case{4, 1536, 1}}) {
      const std::string what = "linear few rows (mode " + std::to_string(mode) + ") T=" +
                               std::to_string(c.T) + " K=" + std::to_string(c.K) +
                               " N=" + std::to_string(c.N);
      const float s = 1.0f / std::sqrt(static_cast<float>(c.K));
      Tensor x = Make(Rand(c.T * c.K, 11 + c.T), {c.T, c.K});
      Tensor w = Make(Rand(c.N * c.K, 12 + c.K, -s, s), {c.N, c.K});
      const std::vector<double> ref = MatMulRef(Get(x), Get(w), c.T, c.K, c.N);
      Tensor out = Out({c.T, c.N});
      ASSERT_TRUE(be_->Linear(x, w, &out).ok()) << what;
      ExpectClose(out, ref, what);
      if (!invariant) continue;
      const std::vector<double> all = Get(out);
      for (int t = 0; t < c.T; ++t) {
        Tensor one = Out({1, c.N});
        ASSERT_TRUE(be_->Linear(x.Rows(t, t + 1), w, &one).ok()) << what;
        const std::vector<double> alone = Get(one);
        for (int n = 0; n < c.N; ++n) {
          ASSERT_EQ(alone[n], all[t * c.N + n]) << what << " [" << GetParam() << "] row " << t
                                                << " column " << n << ": alone vs in the batch";
        }
      }
    }
  }
#ifdef TREESPEC_HAVE_CUDA_KERNELS
  if (shipped >= 0) cuda::SetSkinnyMaxRows(be_.get(), shipped);
#endif
}

TEST_P(BackendOpsTest, AddAlsoInPlace) {
  Tensor a = Make(Rand(301, 7), {301});
  Tensor b = Make(Rand(301, 8), {301});
  std::vector<double> as = Get(a), bs = Get(b), ref(301);
  for (int i = 0; i < 301; ++i) ref[i] = as[i] + bs[i];
  Tensor out = Out({301});
  ASSERT_TRUE(be_->Add(a, b, &out).ok());
  ExpectClose(out, ref, "add");
  ASSERT_TRUE(be_->Add(a, b, &a).ok());
  ExpectClose(a, ref, "add in place");
}

TEST_P(BackendOpsTest, SiluMul) {
  const int T = 6, F = 70;
  Tensor gu = Make(Rand(T * 2 * F, 9, -4.0f, 4.0f), {T, 2 * F});
  std::vector<double> g = Get(gu), ref(T * F);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < F; ++i) {
      const double x = g[t * 2 * F + i], u = g[t * 2 * F + F + i];
      ref[t * F + i] = x / (1.0 + std::exp(-x)) * u;
    }
  }
  Tensor out = Out({T, F});
  ASSERT_TRUE(be_->SiluMul(gu, &out).ok());
  ExpectClose(out, ref, "silu_mul");
}

TEST_P(BackendOpsTest, AddBiasPerRow) {
  const int T = 7, N = 90;
  Tensor x = Make(Rand(T * N, 40), {T, N});
  Tensor b = Make(Rand(N, 41), {N});
  std::vector<double> xs = Get(x), bs = Get(b), ref(T * N);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < N; ++i) ref[t * N + i] = xs[t * N + i] + bs[i];
  }
  ASSERT_TRUE(be_->AddBias(&x, b).ok());
  ExpectClose(x, ref, "add_bias");
  Tensor wrong = Make(Rand(N - 1, 42), {N - 1});
  EXPECT_FALSE(be_->AddBias(&x, wrong).ok());
}

TEST_P(BackendOpsTest, HeadRmsNormTouchesOnlyItsHeads) {
  // qkv rows of H = 3 q heads, Hkv = 2 k heads, 2 v heads of Dh = 16.
  const int T = 5, Dh = 16, heads = 7, W = heads * Dh;
  Tensor x = Make(Rand(T * W, 43, -2.0f, 2.0f), {T, W});
  Tensor wq = Make(Rand(Dh, 44, 0.5f, 1.5f), {Dh});
  Tensor wk = Make(Rand(Dh, 45, 0.5f, 1.5f), {Dh});
  std::vector<double> xs = Get(x), wqs = Get(wq), wks = Get(wk), ref = xs;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < 5; ++h) {
      const std::vector<double>& w = h < 3 ? wqs : wks;
      double ss = 0;
      for (int d = 0; d < Dh; ++d) ss += xs[t * W + h * Dh + d] * xs[t * W + h * Dh + d];
      const double inv = 1.0 / std::sqrt(ss / Dh + 1e-6);
      for (int d = 0; d < Dh; ++d) ref[t * W + h * Dh + d] = w[d] * xs[t * W + h * Dh + d] * inv;
    }
  }
  ASSERT_TRUE(be_->HeadRmsNorm(&x, wq, 0, 3, 1e-6f).ok());
  ASSERT_TRUE(be_->HeadRmsNorm(&x, wk, 3, 2, 1e-6f).ok());
  ExpectClose(x, ref, "head_rmsnorm (v heads unchanged)");
  EXPECT_FALSE(be_->HeadRmsNorm(&x, wk, 6, 2, 1e-6f).ok()) << "heads past the row";
}

TEST_P(BackendOpsTest, SliceColsAndGatherRows) {
  const int T = 5, W = 24;
  Tensor x = Make(Rand(T * W, 10), {T, W});
  std::vector<double> xs = Get(x);
  for (auto [begin, n] : {std::pair{7, 10}, std::pair{8, 8}, std::pair{0, 24}}) {
    std::vector<double> ref;
    for (int t = 0; t < T; ++t) ref.insert(ref.end(), xs.begin() + t * W + begin, xs.begin() + t * W + begin + n);
    Tensor out = Out({T, n});
    ASSERT_TRUE(be_->SliceCols(x, begin, &out).ok());
    ExpectClose(out, ref, "slice_cols begin=" + std::to_string(begin), {0, 0});
  }
  const std::vector<int32_t> rows = {3, 0, 3, 4};
  std::vector<double> ref;
  for (int32_t r : rows) ref.insert(ref.end(), xs.begin() + r * W, xs.begin() + (r + 1) * W);
  Tensor out = Out({4, W});
  ASSERT_TRUE(be_->GatherRows(x, rows, &out).ok());
  ExpectClose(out, ref, "gather_rows", {0, 0});
  EXPECT_FALSE(be_->GatherRows(x, {5}, &out).ok());
}

// CopyRows has sequential semantics: copy i sees the writes of copies < i.
TEST_P(BackendOpsTest, CopyRowsIsSequential) {
  struct Case {
    std::vector<int32_t> src, dst;
  };
  const std::vector<Case> cases = {
      {{0, 5}, {2, 7}},               // disjoint
      {{2, 3, 7}, {1, 2, 3}},         // KV compaction of path {0, 2, 3, 7}
      {{1, 2, 6, 1}, {2, 6, 0, 1}},   // chains, a read of a row written before, a self copy
      {{4, 5}, {5, 4}},               // swap-like: second copy reads the first's result
      {{3, 3, 0}, {6, 7, 3}},         // one source twice, then overwritten
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const int R = 8, row = 3 * 5;
    Tensor pool = Make(Rand(R * row, 11 + c), {R, 3, 5});
    std::vector<double> ref = Get(pool);
    for (size_t i = 0; i < cases[c].src.size(); ++i) {
      std::copy(ref.begin() + cases[c].src[i] * row, ref.begin() + (cases[c].src[i] + 1) * row,
                ref.begin() + cases[c].dst[i] * row);
    }
    ASSERT_TRUE(be_->CopyRows(&pool, cases[c].src, cases[c].dst).ok());
    ExpectClose(pool, ref, "copy_rows case " + std::to_string(c), {0, 0});
  }
}

// KV compaction through PagedKvCache on this backend: the accepted path's K/V
// rows move to the front of the tree's span, across non-contiguous blocks.
TEST_P(BackendOpsTest, KvCompactionMovesAcceptedPath) {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 16;
  o.block_size = 4;
  o.num_blocks = 12;
  auto cache_or = PagedKvCache::Create(o, be_.get());
  ASSERT_TRUE(cache_or.ok()) << cache_or.status();
  PagedKvCache& cache = **cache_or;
  int64_t other = cache.CreateSequence();
  ASSERT_TRUE(cache.Reserve(other, 5).ok());  // interleave blocks: not contiguous
  int64_t seq = cache.CreateSequence();
  ASSERT_TRUE(cache.Reserve(seq, 3).ok());
  ASSERT_TRUE(cache.Reserve(other, 9).ok());
  ASSERT_TRUE(cache.Reserve(seq, 3 + 10).ok());
  ASSERT_TRUE(cache.Commit(seq, 3).ok());
  const int64_t row = 2 * 16;
  std::vector<std::vector<double>> ref(4);
  for (int l = 0; l < 2; ++l) {
    for (Tensor* t : {cache.k(l), cache.v(l)}) {
      std::vector<float> v = Rand(t->numel(), 20 + l);
      ASSERT_TRUE(be_->Upload(v.data(), DType::kF32, t).ok());
    }
  }
  auto batch = cache.BuildBatch(std::vector<int64_t>{seq}, std::vector<int>{10}, std::vector<int>{0});
  ASSERT_TRUE(batch.ok());
  const std::vector<int32_t> path = {0, 2, 3, 7, 9};
  for (int l = 0; l < 2; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<double> r = Get(kv == 0 ? *cache.k(l) : *cache.v(l));
      for (size_t k = 0; k < path.size(); ++k) {
        const int32_t from = batch->Slot(0, 3 + path[k]), to = batch->Slot(0, 3 + k);
        std::copy(r.begin() + from * row, r.begin() + (from + 1) * row, r.begin() + to * row);
      }
      ref[l * 2 + kv] = r;
    }
  }
  ASSERT_TRUE(cache.CommitPath(seq, path).ok());
  EXPECT_EQ(cache.length(seq), 8);
  for (int l = 0; l < 2; ++l) {
    ExpectClose(*cache.k(l), ref[l * 2], "k layer " + std::to_string(l), {0, 0});
    ExpectClose(*cache.v(l), ref[l * 2 + 1], "v layer " + std::to_string(l), {0, 0});
  }
}

// ---- attention ------------------------------------------------------------------

struct SeqSpec {
  int ctx;
  int n;
  std::vector<int32_t> parents;  // empty: causal chain; else [prior + n], a tree
  int prior = 0;                 // tree nodes written by an earlier call
};

// Block tables drawn from a shuffled pool (non-contiguous, in no order), one
// padding column of -1, and ancestor-or-self masks for trees (rows of the new
// nodes only, over all prior + n tail columns).
AttentionBatch MakeBatch(const std::vector<SeqSpec>& seqs, int block_size, int num_blocks,
                         uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  AttentionBatch b;
  b.num_seqs = static_cast<int>(seqs.size());
  b.block_size = block_size;
  int width = 0;
  for (const SeqSpec& s : seqs) {
    width = std::max(width, (s.ctx + s.prior + s.n + block_size - 1) / block_size);
  }
  b.max_blocks_per_seq = width + 1;
  b.block_tables.assign(seqs.size() * b.max_blocks_per_seq, -1);
  b.query_start.push_back(0);
  size_t next = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqSpec& s = seqs[i];
    const int need = (s.ctx + s.prior + s.n + block_size - 1) / block_size;
    for (int k = 0; k < need; ++k) b.block_tables[i * b.max_blocks_per_seq + k] = blocks.at(next++);
    b.context_lens.push_back(s.ctx);
    b.prior_lens.push_back(s.prior);
    b.query_start.push_back(b.query_start.back() + s.n);
    if (s.parents.empty()) {
      b.mask_offset.push_back(-1);
      continue;
    }
    const int total = s.prior + s.n, words = (total + 63) / 64;
    std::vector<uint64_t> m(static_cast<size_t>(total) * words, 0);
    for (int j = 0; j < total; ++j) {
      if (s.parents[j] >= 0) std::memcpy(&m[j * words], &m[s.parents[j] * words], 8 * words);
      m[j * words + j / 64] |= 1ull << (j % 64);
    }
    b.mask_offset.push_back(static_cast<int32_t>(b.mask_words.size()));
    b.mask_words.insert(b.mask_words.end(), m.begin() + s.prior * words, m.end());
  }
  return b;
}

// Random tree of n nodes in topological order (each parent precedes its child).
std::vector<int32_t> RandomTree(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> parents(n, -1);
  for (int i = 1; i < n; ++i) parents[i] = std::uniform_int_distribution<int>(std::max(0, i - 6), i - 1)(rng);
  return parents;
}

TEST_P(BackendOpsTest, AttentionDecodeTreePrefillGqa) {
  struct Case {
    const char* name;
    int H, Hkv, Dh;
    std::vector<SeqSpec> seqs;
  };
  const std::vector<int32_t> tree11 = {-1, 0, 0, 1, 1, 2, 3, 6, 6, 2, 9};
  const std::vector<Case> cases = {
      {"decode batch", 8, 2, 64, {{5, 1, {}}, {37, 1, {}}, {0, 1, {}}, {130, 1, {}}}},
      {"tree", 4, 4, 128, {{9, 11, tree11}}},
      {"prefill chain", 8, 2, 16, {{20, 70, {}}}},
      {"mixed batch", 8, 2, 8, {{3, 11, tree11}, {0, 9, {}}, {21, 1, {}}, {64, 100, RandomTree(100, 3)}}},
      {"long context split", 4, 1, 128, {{700, 1, {}}, {300, 4, RandomTree(4, 5)}}},
      {"mha decode", 4, 4, 32, {{200, 1, {}}}},
      // Pairs of q heads per kv head (the demo target's heads): the CPU's
      // AVX-512 path reads each key row once for both.
      {"gqa pairs", 8, 4, 32, {{40, 1, {}}, {17, 11, tree11}, {0, 33, {}}}},
      // Heads of 48 (three 16-lane rows), also read in pairs.
      {"gqa pairs of 48", 4, 2, 48, {{40, 1, {}}, {17, 11, tree11}}},
      {"tree grown over two calls", 8, 2, 64,
       {{9, 7, {-1, 0, 0, 1, 1, 2, 3, 6, 6, 2, 9}, 4}, {30, 70, RandomTree(90, 7), 20}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int bs = 4;
    int blocks = 0;
    for (const SeqSpec& s : c.seqs) blocks += (s.ctx + s.prior + s.n + bs - 1) / bs;
    blocks += 7;
    AttentionBatch batch = MakeBatch(c.seqs, bs, blocks, 31);
    const int T = batch.num_tokens(), slots = blocks * bs;
    Tensor q = Make(Rand(T * c.H * c.Dh, 32), {T, c.H, c.Dh});
    Tensor kc = Make(Rand(slots * c.Hkv * c.Dh, 33), {slots, c.Hkv, c.Dh});
    Tensor vc = Make(Rand(slots * c.Hkv * c.Dh, 34), {slots, c.Hkv, c.Dh});
    std::vector<double> qs = Get(q), ks = Get(kc), vs = Get(vc);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
    std::vector<double> ref(T * c.H * c.Dh);
    const int group = c.H / c.Hkv;
    for (int s = 0; s < batch.num_seqs; ++s) {
      const int ctx = batch.context_lens[s];
      for (int i = 0; i < batch.num_new(s); ++i) {
        const int t = batch.query_start[s] + i;
        std::vector<int> vis;
        for (int p = 0; p < ctx; ++p) vis.push_back(batch.Slot(s, p));
        for (int j = 0; j < batch.tail_len(s); ++j) {
          if (batch.Sees(s, i, j)) vis.push_back(batch.Slot(s, ctx + j));
        }
        for (int h = 0; h < c.H; ++h) {
          const int g = h / group;
          std::vector<double> sc(vis.size());
          double mx = -INFINITY, sum = 0;
          for (size_t k = 0; k < vis.size(); ++k) {
            double dot = 0;
            for (int d = 0; d < c.Dh; ++d) {
              dot += qs[(t * c.H + h) * c.Dh + d] * ks[(vis[k] * c.Hkv + g) * c.Dh + d];
            }
            sc[k] = dot * scale;
            mx = std::max(mx, sc[k]);
          }
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int d = 0; d < c.Dh; ++d) {
            double acc = 0;
            for (size_t k = 0; k < vis.size(); ++k) acc += sc[k] * vs[(vis[k] * c.Hkv + g) * c.Dh + d];
            ref[(t * c.H + h) * c.Dh + d] = acc / sum;
          }
        }
      }
    }
    auto plan = be_->PlanAttention(batch);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor out = Out({T, c.H, c.Dh});
    absl::Status st = be_->Attention(q, kc, vc, **plan, scale, &out);
    ASSERT_TRUE(st.ok()) << st;
    ExpectClose(out, ref, c.name);
    // The plan is reused by every layer: a second call gives the same result.
    Poison(&out);
    ASSERT_TRUE(be_->Attention(q, kc, vc, **plan, scale, &out).ok());
    ExpectClose(out, ref, std::string(c.name) + " (plan reused)");
  }
}

// Sliding window: a query at position q sees keys at p > q - window, tree
// nodes by their depth position. The CPU backend masks; CUDA refuses a window
// that would mask anything and runs one that does not.
TEST_P(BackendOpsTest, AttentionSlidingWindow) {
  const int H = 4, Hkv = 2, Dh = 16, bs = 4, blocks = 16;
  const std::vector<int32_t> tree = {-1, 0, 0, 1, 3, 4, 5, 2};  // depths 0 1 1 2 3 4 5 2
  const std::vector<SeqSpec> seqs = {{9, 8, tree}, {6, 5, {}}};
  AttentionBatch batch = MakeBatch(seqs, bs, blocks, 46);
  std::vector<int32_t> depth(tree.size());
  for (size_t i = 0; i < tree.size(); ++i) depth[i] = tree[i] < 0 ? 0 : depth[tree[i]] + 1;
  batch.tail_depth_offset = {0, -1};
  batch.tail_depths = depth;
  const int T = batch.num_tokens(), slots = blocks * bs;
  Tensor q = Make(Rand(T * H * Dh, 47), {T, H, Dh});
  Tensor kc = Make(Rand(slots * Hkv * Dh, 48), {slots, Hkv, Dh});
  Tensor vc = Make(Rand(slots * Hkv * Dh, 49), {slots, Hkv, Dh});
  std::vector<double> qs = Get(q), ks = Get(kc), vs = Get(vc);
  const float scale = 0.25f;
  for (int window : {4, 100}) {
    SCOPED_TRACE(window);
    batch.sliding_window = window;
    std::vector<double> ref(T * H * Dh);
    for (int s = 0; s < batch.num_seqs; ++s) {
      const int ctx = batch.context_lens[s];
      for (int i = 0; i < batch.num_new(s); ++i) {
        const int t = batch.query_start[s] + i;
        const int qpos = ctx + (s == 0 ? depth[i] : i);
        std::vector<int> vis;
        for (int p = 0; p < ctx; ++p) {
          if (qpos - p < window) vis.push_back(batch.Slot(s, p));
        }
        for (int j = 0; j < batch.tail_len(s); ++j) {
          const int kpos = ctx + (s == 0 ? depth[j] : j);
          if (batch.Sees(s, i, j) && qpos - kpos < window) vis.push_back(batch.Slot(s, ctx + j));
        }
        ASSERT_FALSE(vis.empty());
        for (int h = 0; h < H; ++h) {
          const int g = h / (H / Hkv);
          std::vector<double> sc(vis.size());
          double mx = -INFINITY, sum = 0;
          for (size_t k = 0; k < vis.size(); ++k) {
            double dot = 0;
            for (int d = 0; d < Dh; ++d) dot += qs[(t * H + h) * Dh + d] * ks[(vis[k] * Hkv + g) * Dh + d];
            sc[k] = dot * scale;
            mx = std::max(mx, sc[k]);
          }
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int d = 0; d < Dh; ++d) {
            double acc = 0;
            for (size_t k = 0; k < vis.size(); ++k) acc += sc[k] * vs[(vis[k] * Hkv + g) * Dh + d];
            ref[(t * H + h) * Dh + d] = acc / sum;
          }
        }
      }
    }
    auto plan = be_->PlanAttention(batch);
    if (GetParam() != "cpu" && window == 4) {
      ASSERT_FALSE(plan.ok());
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor out = Out({T, H, Dh});
    ASSERT_TRUE(be_->Attention(q, kc, vc, **plan, scale, &out).ok());
    ExpectClose(out, ref, "sliding window " + std::to_string(window));
  }
}

// Full rotary (Rd = Dh) and partial rotary (Bamba: Rd < Dh, the columns past
// Rd copied), inv_freq [Rd / 2].
TEST_P(BackendOpsTest, QkvRopeWritesPagedCache) {
  const int bs = 4, blocks = 11;
  const std::vector<SeqSpec> seqs = {{5, 3, {}}, {2, 6, {-1, 0, 0, 1, 2, 2}}, {3, 2, {-1, 0, 1}, 1}};
  AttentionBatch batch = MakeBatch(seqs, bs, blocks, 41);
  const int T = batch.num_tokens(), slots = blocks * bs;
  struct Layout {
    int H, Hkv, Dh;
  };
  // The second layout's 1,800-3,000 items a token span several thread blocks on CUDA.
  for (Layout layout : {Layout{4, 2, 16}, Layout{32, 8, 64}}) {
    const int H = layout.H, Hkv = layout.Hkv, Dh = layout.Dh;
    const int W = (H + 2 * Hkv) * Dh;
    for (int half : {Dh / 2, Dh / 4, 3}) {
      SCOPED_TRACE("rotary dims " + std::to_string(2 * half) + " of " + std::to_string(Dh));
      Tensor qkv = Make(Rand(T * W, 42), {T, W});
      std::vector<int32_t> pos(T);
      std::mt19937 rng(43);
      for (int32_t& p : pos) p = std::uniform_int_distribution<int>(0, 4000)(rng);
      std::vector<float> inv(half);
      for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0f, -static_cast<float>(i) / half);
      Tensor inv_t = MakeAs(inv, {half}, DType::kF32);
      Tensor kc = Make(Rand(slots * Hkv * Dh, 44), {slots, Hkv, Dh});
      Tensor vc = Make(Rand(slots * Hkv * Dh, 45), {slots, Hkv, Dh});
      std::vector<double> x = Get(qkv), kref = Get(kc), vref = Get(vc), qref(T * H * Dh);
      auto rotate = [&](const double* in, int32_t p, double* out) {
        for (int d = 2 * half; d < Dh; ++d) out[d] = in[d];
        for (int i = 0; i < half; ++i) {
          const double angle = static_cast<float>(p) * inv[i];  // float angle, as specified
          const double c = std::cos(angle), s = std::sin(angle);
          out[i] = in[i] * c - in[i + half] * s;
          out[i + half] = in[i + half] * c + in[i] * s;
        }
      };
      for (int s = 0; s < batch.num_seqs; ++s) {
        for (int i = 0; i < batch.num_new(s); ++i) {
          const int t = batch.query_start[s] + i;
          const int slot = batch.Slot(s, batch.Position(s, i));
          for (int h = 0; h < H; ++h) rotate(&x[t * W + h * Dh], pos[t], &qref[(t * H + h) * Dh]);
          for (int g = 0; g < Hkv; ++g) {
            rotate(&x[t * W + (H + g) * Dh], pos[t], &kref[(slot * Hkv + g) * Dh]);
            for (int d = 0; d < Dh; ++d) {
              vref[(slot * Hkv + g) * Dh + d] = x[t * W + (H + Hkv + g) * Dh + d];
            }
          }
        }
      }
      auto plan = be_->PlanAttention(batch);
      ASSERT_TRUE(plan.ok()) << plan.status();
      Tensor q = Out({T, H, Dh});
      ASSERT_TRUE(be_->QkvRope(qkv, MakeI32(pos), inv_t, **plan, &q, &kc, &vc).ok());
      ExpectClose(q, qref, "rope q");
      ExpectClose(kc, kref, "rope k cache");
      ExpectClose(vc, vref, "v cache", {0, 0});
    }
  }
  // More rotary dims than the head has.
  const int H = 4, Hkv = 2, Dh = 16, W = (H + 2 * Hkv) * Dh;
  auto plan = be_->PlanAttention(batch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor q = Out({T, H, Dh});
  Tensor kc = Out({slots, Hkv, Dh}), vc = Out({slots, Hkv, Dh});
  std::vector<int32_t> pos(T, 1);
  EXPECT_EQ(be_->QkvRope(Make(Rand(T * W, 46), {T, W}), MakeI32(pos),
                         MakeAs(std::vector<float>(Dh / 2 + 1, 1.0f), {Dh / 2 + 1}, DType::kF32),
                         **plan, &q, &kc, &vc)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Mamba ------------------------------------------------------------------------

void ConvRef(const std::vector<double>& x, int L, int C, const std::vector<double>& w,
             const std::vector<double>& b, int K, double* state, double* out) {
  for (int l = 0; l < L; ++l) {
    for (int c = 0; c < C; ++c) {
      double* st = state + c * K;
      for (int k = 0; k + 1 < K; ++k) st[k] = st[k + 1];
      st[K - 1] = x[l * C + c];
      double acc = b[c];
      for (int k = 0; k < K; ++k) acc += st[k] * w[c * K + k];
      out[l * C + c] = acc / (1.0 + std::exp(-acc));
    }
  }
}

TEST_P(BackendOpsTest, MambaConvSequenceAndBatch) {
  const int L = 6, C = 40, K = 4;
  Tensor x = Make(Rand(L * C, 50), {L, C});
  Tensor w = Make(Rand(C * K, 51), {C, K});
  Tensor b = Make(Rand(C, 52), {C});
  Tensor state = Make(Rand(C * K, 53), {C, K});
  std::vector<double> xs = Get(x), ws = Get(w), bs = Get(b), st = Get(state), ref(L * C);
  ConvRef(xs, L, C, ws, bs, K, st.data(), ref.data());
  Tensor out = Out({L, C});
  ASSERT_TRUE(be_->MambaConv(x, w, b, &state, &out).ok());
  ExpectClose(out, ref, "mamba conv");
  ExpectClose(state, st, "mamba conv state", {0, 0});

  const int S = 6;
  const std::vector<int32_t> slots = {2, 0, 5};
  const int B = static_cast<int>(slots.size());
  Tensor xb = Make(Rand(B * C, 54), {B, C});
  Tensor states = Make(Rand(S * C * K, 55), {S, C, K});
  std::vector<double> xbs = Get(xb), sts = Get(states), refb(B * C);
  for (int i = 0; i < B; ++i) {
    std::vector<double> xi(xbs.begin() + i * C, xbs.begin() + (i + 1) * C);
    ConvRef(xi, 1, C, ws, bs, K, &sts[slots[i] * C * K], &refb[i * C]);
  }
  Tensor outb = Out({B, C});
  ASSERT_TRUE(be_->MambaConvBatch(xb, w, b, MakeI32(slots), &states, &outb).ok());
  ExpectClose(outb, refb, "mamba conv batch");
  ExpectClose(states, sts, "mamba conv batch states (others untouched)", {0, 0});
}

double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

void ScanRef(const std::vector<double>& u, const std::vector<double>& delta,
             const std::vector<double>& dt_bias, const std::vector<double>& A,
             const std::vector<double>& Bm, const std::vector<double>& Cm,
             const std::vector<double>& D, const std::vector<double>& z, int L, int C, int N,
             double* state, double* y) {
  for (int l = 0; l < L; ++l) {
    for (int c = 0; c < C; ++c) {
      const double dt = Softplus(delta[l * C + c] + dt_bias[c]);
      double acc = 0;
      for (int n = 0; n < N; ++n) {
        double& h = state[c * N + n];
        h = std::exp(dt * A[c * N + n]) * h + dt * Bm[l * N + n] * u[l * C + c];
        acc += h * Cm[l * N + n];
      }
      const double zz = z[l * C + c];
      y[l * C + c] = (acc + D[c] * u[l * C + c]) * zz / (1.0 + std::exp(-zz));
    }
  }
}

TEST_P(BackendOpsTest, MambaScanSequenceAndBatch) {
  const int L = 5, C = 24, N = 16;
  Tensor u = Make(Rand(L * C, 60), {L, C});
  Tensor delta = Make(Rand(L * C, 61, -3.0f, 1.0f), {L, C});
  Tensor z = Make(Rand(L * C, 62), {L, C});
  Tensor Bm = Make(Rand(L * N, 63), {L, N});
  Tensor Cm = Make(Rand(L * N, 64), {L, N});
  Tensor dt_bias = MakeAs(Rand(C, 65, -2.0f, 0.0f), {C}, DType::kF32);
  Tensor A = MakeAs(Rand(C * N, 66, -4.0f, -0.1f), {C, N}, DType::kF32);
  Tensor D = MakeAs(Rand(C, 67), {C}, DType::kF32);
  Tensor state = MakeAs(Rand(C * N, 68), {C, N}, DType::kF32);
  std::vector<double> us = Get(u), ds = Get(delta), zs = Get(z), bms = Get(Bm), cms = Get(Cm),
                      dtb = Get(dt_bias), as = Get(A), dd = Get(D), st = Get(state), ref(L * C);
  ScanRef(us, ds, dtb, as, bms, cms, dd, zs, L, C, N, st.data(), ref.data());
  Tensor y = Out({L, C});
  ASSERT_TRUE(be_->MambaScan(u, delta, dt_bias, A, Bm, Cm, D, z, &state, &y).ok());
  ExpectClose(y, ref, "mamba scan");
  ExpectClose(state, st, "mamba scan state (f32)", TolFor(DType::kF32));

  const int S = 5;
  const std::vector<int32_t> slots = {4, 1, 2};
  const int B = static_cast<int>(slots.size());
  Tensor ub = Make(Rand(B * C, 70), {B, C});
  Tensor db = Make(Rand(B * C, 71, -3.0f, 1.0f), {B, C});
  Tensor zb = Make(Rand(B * C, 72), {B, C});
  Tensor bb = Make(Rand(B * N, 73), {B, N});
  Tensor cb = Make(Rand(B * N, 74), {B, N});
  Tensor states = MakeAs(Rand(S * C * N, 75), {S, C, N}, DType::kF32);
  std::vector<double> ubs = Get(ub), dbs = Get(db), zbs = Get(zb), bbs = Get(bb), cbs = Get(cb),
                      sts = Get(states), refb(B * C);
  for (int i = 0; i < B; ++i) {
    auto row = [&](const std::vector<double>& v, int w) {
      return std::vector<double>(v.begin() + i * w, v.begin() + (i + 1) * w);
    };
    ScanRef(row(ubs, C), row(dbs, C), dtb, as, row(bbs, N), row(cbs, N), dd, row(zbs, C), 1, C, N,
            &sts[slots[i] * C * N], &refb[i * C]);
  }
  Tensor yb = Out({B, C});
  ASSERT_TRUE(
      be_->MambaScanBatch(ub, db, dt_bias, A, bb, cb, D, zb, MakeI32(slots), &states, &yb).ok());
  ExpectClose(yb, refb, "mamba scan batch");
  ExpectClose(states, sts, "mamba scan batch states", TolFor(DType::kF32));
}

// ---- sampling -----------------------------------------------------------------------

TEST_P(BackendOpsTest, ArgmaxRowsLowestIndexOnTies) {
  const int R = 4, V = 1003;
  std::vector<float> v = Rand(R * V, 80, -5.0f, 5.0f);
  v[0 * V + 17] = 9.0f;
  v[0 * V + 900] = 9.0f;  // tie: 17 wins
  v[1 * V + 1002] = 9.5f;
  v[2 * V + 0] = 8.0f;
  v[2 * V + 1] = 8.0f;
  Tensor logits = Make(v, {R, V});
  std::vector<double> ls = Get(logits);
  std::vector<int32_t> want(R);
  for (int r = 0; r < R; ++r) {
    int best = 0;
    for (int i = 1; i < V; ++i) {
      if (ls[r * V + i] > ls[r * V + best]) best = i;
    }
    want[r] = best;
  }
  std::vector<int32_t> got;
  ASSERT_TRUE(be_->ArgmaxRows(logits, &got).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[0], 17);
}

// Written from the definition, not from any backend's code: tokens ranked by
// (logit descending, id ascending) through std::sort of (-logit, id) pairs;
// the first k survive top-k; a survivor also survives top-p while the mass of
// the survivors ranked above it (softmax at the temperature, renormalised
// over the top-k set) is below top_p; the survivors share the mass in
// proportion to exp(logit / T). Long double throughout.
std::vector<double> ProcessRef(const std::vector<double>& row, double temperature, int top_k,
                               double top_p) {
  const int64_t V = static_cast<int64_t>(row.size());
  std::vector<std::pair<double, int64_t>> ranked(V);
  for (int64_t i = 0; i < V; ++i) ranked[i] = {-row[i], i};
  std::sort(ranked.begin(), ranked.end());
  const int64_t k = top_k > 0 ? std::min<int64_t>(top_k, V) : V;
  const long double top = row[ranked[0].second];
  auto weight = [&](int64_t id) {
    return std::exp((static_cast<long double>(row[id]) - top) / temperature);
  };
  long double top_k_mass = 0;
  for (int64_t r = 0; r < k; ++r) top_k_mass += weight(ranked[r].second);
  std::vector<int64_t> kept;
  long double above = 0, kept_mass = 0;
  for (int64_t r = 0; r < k; ++r) {
    if (top_p < 1.0 && above / top_k_mass >= top_p) break;
    const int64_t id = ranked[r].second;
    kept.push_back(id);
    kept_mass += weight(id);
    above += weight(id);
  }
  std::vector<double> probs(V, 0.0);
  for (int64_t id : kept) probs[id] = static_cast<double>(weight(id) / kept_mass);
  return probs;
}

// Ties and exact cumulative boundaries, with the answers worked out by hand
// (-1000 has probability exactly 0 next to 0, so tied probabilities are exact
// in every storage dtype).
TEST_P(BackendOpsTest, ProcessLogitsRowsTiesAndExactTopPBoundaries) {
  constexpr float kNever = -1000.0f;
  struct Case {
    std::vector<float> logits;
    int top_k;
    float top_p;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      // Four tokens of 1/4: top-p 0.5 is reached exactly after two.
      {{0, 0, 0, 0, kNever, kNever}, 0, 0.5f, {0.5, 0.5, 0, 0, 0, 0}},
      {{0, 0, 0, 0, kNever, kNever}, 0, 0.25f, {1, 0, 0, 0, 0, 0}},
      {{0, 0, 0, 0, kNever, kNever}, 0, 0.5001f, {1. / 3, 1. / 3, 1. / 3, 0, 0, 0}},
      // Ties at the top-k cut go to the lower ids.
      {{kNever, 0, kNever, 0, 0, 0}, 2, 1.0f, {0, 0.5, 0, 0.5, 0, 0}},
      {{kNever, 0, kNever, 0, 0, 0}, 3, 0.5f, {0, 0.5, 0, 0.5, 0, 0}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const int V = static_cast<int>(cases[c].logits.size());
    Tensor logits = Make(cases[c].logits, {1, V});
    Tensor probs = Out({1, V}, DType::kF32);
    Poison(&probs);
    absl::Status st = be_->ProcessLogitsRows(logits, 1.0f, cases[c].top_k, cases[c].top_p, &probs);
    ASSERT_TRUE(st.ok()) << st;
    ExpectClose(probs, cases[c].want, "boundary case " + std::to_string(c), {1e-7, 1e-6});
    std::vector<double> ls = Get(logits);
    std::vector<double> ref = ProcessRef(ls, 1.0, cases[c].top_k, cases[c].top_p);
    for (int i = 0; i < V; ++i) {
      EXPECT_NEAR(ref[i], cases[c].want[i], 1e-12) << "reference, case " << c << " token " << i;
    }
  }
}

TEST_P(BackendOpsTest, ProcessLogitsRowsTopKTopP) {
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    int R, V;
  };
  const std::vector<Case> cases = {
      {0.7f, 0, 1.0f, 3, 2000},  {1.0f, 50, 1.0f, 3, 2000},    {0.8f, 0, 0.9f, 3, 2000},
      {1.3f, 100, 0.8f, 2, 2000}, {1.0f, 7, 1.0f, 2, 64},      {1.0f, 0, 0.95f, 1, 128256},
  };
  for (const Case& c : cases) {
    const std::string what = "T=" + std::to_string(c.temperature) + " k=" +
                             std::to_string(c.top_k) + " p=" + std::to_string(c.top_p) +
                             " V=" + std::to_string(c.V);
    // Coarse values make exact ties (including at the top-k boundary).
    std::vector<float> v = Rand(c.R * c.V, 90 + c.top_k, -8.0f, 8.0f);
    for (float& x : v) x = std::round(x * 16.0f) / 16.0f;
    Tensor logits = Make(v, {c.R, c.V});
    std::vector<double> ls = Get(logits), ref;
    for (int r = 0; r < c.R; ++r) {
      std::vector<double> row(ls.begin() + r * c.V, ls.begin() + (r + 1) * c.V);
      std::vector<double> p = ProcessRef(row, c.temperature, c.top_k, c.top_p);
      ref.insert(ref.end(), p.begin(), p.end());
    }
    Tensor probs = Out({c.R, c.V}, DType::kF32);
    absl::Status st = be_->ProcessLogitsRows(logits, c.temperature, c.top_k, c.top_p, &probs);
    ASSERT_TRUE(st.ok()) << st;
    ExpectClose(probs, ref, what, {1e-7, 1e-5});
  }
}

// ---- graphs -------------------------------------------------------------------------

TEST_P(BackendOpsTest, CaptureAndReplayGraph) {
  const int T = 4, D = 64;
  Tensor a = Make(Rand(T * D, 100), {T, D});
  Tensor b = Make(Rand(T * D, 101), {T, D});
  Tensor w = Make(Rand(D, 102, 0.5f, 1.5f), {D});
  Tensor sum = Out({T, D}), out = Out({T, D});
  auto body = [&]() -> absl::Status {
    absl::Status s = be_->Add(a, b, &sum);
    if (!s.ok()) return s;
    return be_->RmsNorm(sum, w, 1e-6f, &out);
  };
  auto id = be_->CaptureGraph(body);
  if (be_->device() == DeviceKind::kCpu) {
    EXPECT_EQ(id.status().code(), absl::StatusCode::kUnimplemented) << id.status();
    return;
  }
  ASSERT_TRUE(id.ok()) << id.status();
  for (uint32_t round = 0; round < 3; ++round) {
    std::vector<float> av = Rand(T * D, 110 + round);
    ASSERT_TRUE(be_->Upload(av.data(), DType::kF32, &a).ok());
    Poison(&out);
    ASSERT_TRUE(be_->ReplayGraph(*id).ok());
    std::vector<double> as = Get(a), bs = Get(b), ws = Get(w), sums(T * D), ref(T * D);
    std::vector<double> stored = Get(sum);  // the sum as rounded to storage
    for (int t = 0; t < T; ++t) {
      double ss = 0;
      for (int i = 0; i < D; ++i) ss += stored[t * D + i] * stored[t * D + i];
      for (int i = 0; i < D; ++i) ref[t * D + i] = ws[i] * stored[t * D + i] / std::sqrt(ss / D + 1e-6);
      for (int i = 0; i < D; ++i) sums[t * D + i] = as[t * D + i] + bs[t * D + i];
    }
    ExpectClose(sum, sums, "graph add, round " + std::to_string(round));
    ExpectClose(out, ref, "graph rmsnorm, round " + std::to_string(round));
  }
  // Allocation and host transfers are refused inside a capture, and the
  // backend stays usable afterwards.
  auto bad = be_->CaptureGraph([&]() -> absl::Status { return be_->Alloc(DType::kF32, {4}).status(); });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_TRUE(be_->ReplayGraph(*id).ok());
  EXPECT_TRUE(be_->Synchronize().ok());
  EXPECT_FALSE(be_->ReplayGraph(*id + 100).ok());
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendOpsTest,
                         ::testing::Values("cpu", "cuda:f32", "cuda:f16", "cuda:bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

}  // namespace
}  // namespace treespec
