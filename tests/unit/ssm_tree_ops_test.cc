// The Mamba-2 tree ops of the Backend (STree, paper 001 §3) against plain
// double-precision loops that walk each row's root path explicitly, in the
// style of backend_ops_test.cc; the recurrent CPU scan against decoding one
// token at a time (bit for bit) and against the paper's matrix form (within
// rounding); SsmTreeBatch planning; partial-rotary RoPE.
//
// Backends: "cpu" always; "cuda:f16" when a GPU is present, where these ops
// are documented to return UNIMPLEMENTED until their kernels exist (the test
// checks exactly that there).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/tensor/backend.h"
#include "core/tensor/ssm_tree_batch.h"
#include "gtest/gtest.h"
#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows of a root path, root first.
std::vector<int> PathOf(const SsmTreeBatch& b, int r) {
  std::vector<int> path;
  for (int j = r; j >= 0; j = b.parent[j]) path.insert(path.begin(), j);
  return path;
}

// Two sequences and a third that reuses rows of "earlier calls": a chain of
// 3 on slot 2, a tree of 6 on slot 0, a tree of 4 on slot 3.
SsmTreeBatch MixedBatch() {
  SsmTreeBatch b;
  b.AddSequence(2, 3, {});
  b.AddSequence(0, 6, {-1, 0, 0, 1, 2, 3});
  b.AddSequence(3, 4, {-1, 0, -1, 2});
  return b;
}

class SsmTreeOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto b = CreateBackend(GetParam());
    if (!b.ok()) {
      if (GetParam() == "cpu") FAIL() << b.status();
      const std::string why(b.status().message());
      GTEST_SKIP() << (absl::StartsWith(why, "no CUDA device") ? "" : "no CUDA device: ") << why;
    }
    be_ = std::move(*b);
    is_cuda_ = be_->device() == DeviceKind::kCuda;
  }
  Tensor Make(const std::vector<float>& v, Shape shape, DType dtype = DType::kF32) {
    auto t = be_->Alloc(dtype, std::move(shape));
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(be_->Upload(v.data(), DType::kF32, &*t).ok());
    return *t;
  }
  Tensor Nan(Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return Make(std::vector<float>(n, std::nanf("")), std::move(shape));
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> f(t.numel());
    EXPECT_TRUE(be_->DownloadF32(t, f.data()).ok());
    return f;
  }
  void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                  const std::string& what, double atol = 2e-5, double rtol = 2e-5) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) && ++bad <= 5) {
        ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
      }
    }
  }

  std::unique_ptr<Backend> be_;
  bool is_cuda_ = false;
};

TEST(SsmTreeBatchTest, PlanSharesBuffersAlongPathsAndRefusesBadBatches) {
  SsmTreeBatch chain;
  chain.AddSequence(0, 5, {});
  ASSERT_TRUE(chain.Plan(1).ok());
  EXPECT_EQ(chain.num_buffers, 1);
  EXPECT_EQ(chain.parent, (std::vector<int32_t>{-1, 0, 1, 2, 3}));
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 7};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(5).ok());
  EXPECT_LE(b.num_buffers, 3);
  // A row's buffer is never in use by another live row: an ancestor that
  // still has children to come keeps its own.
  for (int r = 0; r < b.num_rows(); ++r) {
    for (int a : PathOf(b, r)) {
      bool more_children = false;
      for (int c = r + 1; c < b.num_rows(); ++c) more_children |= b.parent[c] == a;
      if (a != r && more_children) EXPECT_NE(b.buffer[a], b.buffer[r]) << "row " << r;
    }
  }
  SsmTreeBatch reads_output = MixedBatch();
  reads_output.out_rows = {0};
  reads_output.out_slots = {0};  // read by the second sequence
  EXPECT_EQ(reads_output.Plan(5).code(), absl::StatusCode::kInvalidArgument);
  SsmTreeBatch forward_parent;
  forward_parent.parent = {1, -1};
  forward_parent.slot = {0, 0};
  absl::Status st = forward_parent.Plan(1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "parent of row 0")) << st;
  SsmTreeBatch bad_slot;
  bad_slot.AddSequence(7, 1, {});
  EXPECT_EQ(bad_slot.Plan(5).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(SsmTreeOpsTest, ConvTakesEachRowsRootPath) {
  const int Cd = 12, K = 4, S = 5;
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 7};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(S).ok());
  const int R = b.num_rows();
  const std::vector<float> xs = Rand(R * Cd, 1), ws = Rand(Cd * K, 2), bs = Rand(Cd, 3),
                           st = Rand(S * Cd * K, 4);
  Tensor x = Make(xs, {R, Cd}), w = Make(ws, {Cd, K}), bias = Make(bs, {Cd});
  Tensor states = Make(st, {S, Cd, K}), out = Nan({R, Cd});
  absl::Status status = be_->SsmTreeConv(x, w, bias, b, &states, &out);
  if (is_cuda_) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    return;
  }
  ASSERT_TRUE(status.ok()) << status;
  std::vector<double> ref(R * Cd), ref_states(st.begin(), st.end());
  for (int r = 0; r < R; ++r) {
    const std::vector<int> path = PathOf(b, r);
    for (int c = 0; c < Cd; ++c) {
      // The committed inputs, then the path's: the last K of them.
      std::vector<double> seq;
      for (int k = 0; k < K; ++k) seq.push_back(st[(b.slot[r] * Cd + c) * K + k]);
      for (int j : path) seq.push_back(xs[j * Cd + c]);
      const std::vector<double> window(seq.end() - K, seq.end());
      double acc = bs[c];
      for (int k = 0; k < K; ++k) acc += window[k] * ws[c * K + k];
      ref[r * Cd + c] = acc / (1 + std::exp(-acc));
      for (size_t i = 0; i < b.out_rows.size(); ++i) {
        if (b.out_rows[i] != r) continue;
        for (int k = 0; k < K; ++k) ref_states[(b.out_slots[i] * Cd + c) * K + k] = window[k];
      }
    }
  }
  ExpectNear(Get(out), ref, "conv out");
  ExpectNear(Get(states), ref_states, "conv states (outputs written, the rest untouched)", 0, 0);
}

struct ScanCase {
  int H = 4, P = 3, N = 5, G = 2, S = 5;
  SsmScanParams params;
  std::vector<float> xbc, dt, A, dt_bias, D, states;
  int W() const { return H * P + 2 * G * N; }
  void Fill(int R, uint32_t seed) {
    params.n_groups = G;
    xbc = Rand(R * W(), seed);
    dt = Rand(R * H, seed + 1, -3.0f, 1.0f);
    A = Rand(H, seed + 2, -4.0f, -0.2f);
    dt_bias = Rand(H, seed + 3, -1.0f, 0.5f);
    D = Rand(H, seed + 4);
    states = Rand(S * H * P * N, seed + 5);
  }
};

// The recurrence along each row's path, in double.
void ScanRef(const ScanCase& c, const SsmTreeBatch& b, std::vector<double>* y,
             std::vector<double>* states) {
  const int H = c.H, P = c.P, N = c.N, W = c.W();
  const std::vector<double> committed(c.states.begin(), c.states.end());
  *states = committed;
  y->assign(b.num_rows() * H * P, 0.0);
  for (int r = 0; r < b.num_rows(); ++r) {
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / c.G);
      std::vector<double> s(committed.begin() + (b.slot[r] * H + h) * P * N,
                            committed.begin() + (b.slot[r] * H + h + 1) * P * N);
      for (int j : PathOf(b, r)) {
        double dt = c.dt[j * H + h] + c.dt_bias[h];
        dt = dt > 20 ? dt : std::log1p(std::exp(dt));
        dt = std::min<double>(std::max<double>(dt, c.params.dt_min), c.params.dt_max);
        for (int p = 0; p < P; ++p) {
          for (int n = 0; n < N; ++n) {
            s[p * N + n] = std::exp(dt * c.A[h]) * s[p * N + n] +
                           dt * c.xbc[j * W + h * P + p] * c.xbc[j * W + H * P + g * N + n];
          }
        }
      }
      for (int p = 0; p < P; ++p) {
        double acc = c.D[h] * c.xbc[r * W + h * P + p];
        for (int n = 0; n < N; ++n) acc += c.xbc[r * W + H * P + (c.G + g) * N + n] * s[p * N + n];
        (*y)[(r * H + h) * P + p] = acc;
      }
      for (size_t i = 0; i < b.out_rows.size(); ++i) {
        if (b.out_rows[i] != r) continue;
        std::copy(s.begin(), s.end(), states->begin() + (b.out_slots[i] * H + h) * P * N);
      }
    }
  }
}

TEST_P(SsmTreeOpsTest, ScanFollowsEachRowsRootPath) {
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 8};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(5).ok());
  ScanCase c;
  c.Fill(b.num_rows(), 10);
  c.params.dt_max = 1.5f;  // clamps some rows
  const int R = b.num_rows(), H = c.H, P = c.P, N = c.N;
  Tensor xbc = Make(c.xbc, {R, c.W()}), dt = Make(c.dt, {R, H}), A = Make(c.A, {H});
  Tensor dtb = Make(c.dt_bias, {H}), D = Make(c.D, {H}), y = Nan({R, H * P});
  Tensor states = Make(c.states, {c.S, H, P, N});
  absl::Status st = be_->SsmTreeScan(xbc, dt, A, dtb, D, c.params, b, &states, &y);
  if (is_cuda_) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    return;
  }
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> ref_y, ref_states;
  ScanRef(c, b, &ref_y, &ref_states);
  ExpectNear(Get(y), ref_y, "scan y");
  ExpectNear(Get(states), ref_states, "scan states");
  // States alone (y null), as activation replay runs it.
  Tensor again = Make(c.states, {c.S, H, P, N});
  ASSERT_TRUE(be_->SsmTreeScan(xbc, dt, A, dtb, D, c.params, b, &again, nullptr).ok());
  EXPECT_EQ(Get(again), Get(states));
  // Shapes that do not fit are refused.
  Tensor short_dt = Make(std::vector<float>(R * (H - 1)), {R, H - 1});
  EXPECT_EQ(be_->SsmTreeScan(xbc, short_dt, A, dtb, D, c.params, b, &states, &y).code(),
            absl::StatusCode::kInvalidArgument);
}

// Every row of a tree equals feeding its path one token at a time, each
// step its own call whose state the next call starts from: bit for bit, the
// property greedy speculation rests on.
TEST_P(SsmTreeOpsTest, TreeRowsEqualOneTokenStepsBitForBit) {
  if (is_cuda_) GTEST_SKIP() << "bit-exactness is the CPU backend's contract";
  SsmTreeBatch tree;
  tree.AddSequence(0, 7, {-1, 0, 0, 1, 1, 2, 5});
  ASSERT_TRUE(tree.Plan(2).ok());
  ScanCase c;
  c.S = 2;
  c.Fill(tree.num_rows(), 30);
  const int R = tree.num_rows(), H = c.H, P = c.P, N = c.N, W = c.W();
  Tensor xbc = Make(c.xbc, {R, W}), dt = Make(c.dt, {R, H}), A = Make(c.A, {H});
  Tensor dtb = Make(c.dt_bias, {H}), D = Make(c.D, {H}), y = Nan({R, H * P});
  Tensor states = Make(c.states, {c.S, H, P, N});
  ASSERT_TRUE(be_->SsmTreeScan(xbc, dt, A, dtb, D, c.params, tree, &states, &y).ok());
  const std::vector<float> tree_y = Get(y);
  for (int r = 0; r < R; ++r) {
    // Slots 0 and 1 take turns: each step reads one and writes the other.
    Tensor st = Make(c.states, {c.S, H, P, N});
    std::vector<float> step_y;
    int from = 0;
    for (int j : PathOf(tree, r)) {
      SsmTreeBatch one;
      one.AddSequence(from, 1, {});
      one.out_rows = {0};
      one.out_slots = {1 - from};
      ASSERT_TRUE(one.Plan(2).ok());
      Tensor x1 = Make(std::vector<float>(c.xbc.begin() + j * W, c.xbc.begin() + (j + 1) * W), {1, W});
      Tensor d1 = Make(std::vector<float>(c.dt.begin() + j * H, c.dt.begin() + (j + 1) * H), {1, H});
      Tensor y1 = Nan({1, H * P});
      ASSERT_TRUE(be_->SsmTreeScan(x1, d1, A, dtb, D, c.params, one, &st, &y1).ok());
      step_y = Get(y1);
      from = 1 - from;
    }
    for (int k = 0; k < H * P; ++k) {
      ASSERT_EQ(tree_y[r * H * P + k], step_y[k]) << "row " << r << " element " << k;
    }
  }
}

// The paper's matrix form (A_tree = L·A_log, y = Mx·x0 + Mu·u) agrees with
// the recurrence within rounding, outputs and written states.
TEST(SsmTreeMatrixTest, MatrixFormMatchesTheRecurrence) {
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 8};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(5).ok());
  ScanCase c;
  c.H = 6;
  c.G = 3;
  c.Fill(b.num_rows(), 50);
  const cpu::SsmScanDims dims{c.H, c.P, c.N};
  std::vector<float> y_rec(b.num_rows() * c.H * c.P), y_mat(y_rec.size());
  std::vector<float> s_rec = c.states, s_mat = c.states;
  cpu::SsmTreeScan(c.xbc.data(), c.dt.data(), c.A.data(), c.dt_bias.data(), c.D.data(), c.params,
                   dims, b, s_rec.data(), y_rec.data());
  cpu::SsmTreeScanMatrix(c.xbc.data(), c.dt.data(), c.A.data(), c.dt_bias.data(), c.D.data(),
                         c.params, dims, b, s_mat.data(), y_mat.data());
  double worst = 0;
  for (size_t i = 0; i < y_rec.size(); ++i) {
    ASSERT_NEAR(y_mat[i], y_rec[i], 1e-5 + 1e-5 * std::fabs(y_rec[i])) << "y element " << i;
    worst = std::max(worst, double{std::fabs(y_mat[i] - y_rec[i])});
  }
  for (size_t i = 0; i < s_rec.size(); ++i) {
    ASSERT_NEAR(s_mat[i], s_rec[i], 1e-5 + 1e-5 * std::fabs(s_rec[i])) << "state element " << i;
  }
  // Different summation orders: equal only up to rounding, and not always bit for bit.
  std::cout << "matrix form vs recurrence: max |dy| = " << worst << "\n";
}

TEST_P(SsmTreeOpsTest, GatedRmsNormPerGroupAlsoInPlace) {
  const int R = 3, W = 12, group = 4, count = 4;
  const std::vector<float> ys = Rand(R * W, 70), zs = Rand(R * W, 71, -3.0f, 3.0f),
                           ws = Rand(W, 72);
  Tensor y = Make(ys, {R, W}), z = Make(zs, {R, W}), w = Make(ws, {W}), ss = Nan({R, W / group});
  absl::Status st = be_->GateSumSquares(y, z, group, &y, &ss);  // g aliases y
  if (is_cuda_) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    EXPECT_EQ(be_->GroupRmsScale(y, ss, w, count, 1e-5f, &y).code(),
              absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> g(R * W), ref_ss(R * W / group, 0.0), ref(R * W);
  for (int i = 0; i < R * W; ++i) {
    g[i] = ys[i] * zs[i] / (1 + std::exp(-double{zs[i]}));
    ref_ss[(i / W) * (W / group) + (i % W) / group] += g[i] * g[i];
  }
  ExpectNear(Get(y), g, "gate");
  ExpectNear(Get(ss), ref_ss, "sums of squares");
  for (int i = 0; i < R * W; ++i) {
    ref[i] = ws[i % W] * g[i] / std::sqrt(ref_ss[(i / W) * (W / group) + (i % W) / group] / count + 1e-5);
  }
  ASSERT_TRUE(be_->GroupRmsScale(y, ss, w, count, 1e-5f, &y).ok());
  ExpectNear(Get(y), ref, "gated rmsnorm");
  // A tensor-parallel shard: the sums cover more columns (count) than it holds.
  Tensor out = Nan({R, W});
  ASSERT_TRUE(be_->GroupRmsScale(Make(std::vector<float>(g.begin(), g.end()), {R, W}), ss, w, 2 * W,
                                 1e-5f, &out).ok());
  for (int i = 0; i < R * W; ++i) {
    ref[i] = ws[i % W] * g[i] / std::sqrt(ref_ss[(i / W) * (W / group) + (i % W) / group] / (2 * W) + 1e-5);
  }
  ExpectNear(Get(out), ref, "gated rmsnorm over a larger count");
}

// Partial rotary (Bamba): the first Rd columns of each head rotate, the rest pass.
TEST_P(SsmTreeOpsTest, QkvRopeRotatesOnlyTheRotaryColumns) {
  const int H = 2, Hkv = 1, Dh = 8, rot_half = 2, T = 2;
  AttentionBatch batch;
  batch.num_seqs = 1;
  batch.block_size = 4;
  batch.max_blocks_per_seq = 1;
  batch.query_start = {0, T};
  batch.context_lens = {0};
  batch.prior_lens = {0};
  batch.block_tables = {0};
  batch.mask_offset = {-1};
  const int W = (H + 2 * Hkv) * Dh;
  const std::vector<float> xs = Rand(T * W, 80);
  const std::vector<float> inv = {1.0f, 0.01f};
  const std::vector<int32_t> pos = {3, 7};
  Tensor qkv = Make(xs, {T, W});
  Tensor inv_t = Make(inv, {rot_half});
  auto positions = be_->Alloc(DType::kI32, {T});
  ASSERT_TRUE(positions.ok());
  ASSERT_TRUE(be_->Upload(pos.data(), DType::kI32, &*positions).ok());
  auto plan = be_->PlanAttention(batch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor q = Nan({T, H, Dh}), kc = Nan({4, Hkv, Dh}), vc = Nan({4, Hkv, Dh});
  absl::Status st = be_->QkvRope(qkv, *positions, inv_t, **plan, &q, &kc, &vc);
  if (is_cuda_) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    return;
  }
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> ref_q(T * H * Dh);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* x = &xs[t * W + h * Dh];
      double* out = &ref_q[(t * H + h) * Dh];
      for (int d = 2 * rot_half; d < Dh; ++d) out[d] = x[d];
      for (int i = 0; i < rot_half; ++i) {
        const double a = static_cast<float>(pos[t]) * inv[i];
        out[i] = x[i] * std::cos(a) - x[i + rot_half] * std::sin(a);
        out[i + rot_half] = x[i + rot_half] * std::cos(a) + x[i] * std::sin(a);
      }
    }
  }
  ExpectNear(Get(q), ref_q, "partial rotary q", 1e-5, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Backends, SsmTreeOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace treespec
