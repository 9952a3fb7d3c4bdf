// The Mamba-2 tree ops of the Backend (STree, paper 001 §3) against plain
// double-precision loops that walk each row's root path explicitly, in the
// style of backend_ops_test.cc; the recurrent CPU scan against decoding one
// token at a time (bit for bit) and against the paper's matrix form (within
// rounding); SsmTreeBatch planning; partial-rotary RoPE.
//
// Backends: "cpu" always; "cuda_f32", "cuda_f16", "cuda_bf16" when a GPU is
// present (otherwise those cases skip). Activations (conv inputs and states,
// xbc, dt, y, gate, norm weights, qkv) are in the backend's storage dtype and
// the references read them back, so they see the rounded values the op sees;
// SSM states, A, dt_bias, D and the sums of squares are f32. Outputs are
// poisoned with NaN first. Tolerances, |a - ref| <= atol + rtol·|ref|:
//   cpu (the f32 recurrence)                          2e-5, 2e-5
//   cuda f32 results (the chunked matrix form in f32:
//     another summation order and the device's expf) 1e-4, 1e-4
//   cuda f16 outputs (one rounding to f16)            2e-3, 4e-3
//   cuda bf16 outputs (one rounding to bf16)          1.5e-2, 1.6e-2
// SSM states are f32 on every backend, so they get the f32 bounds; conv
// state windows are copies and must match exactly.
//
// With the CUDA kernels built (TREESPEC_HAVE_CUDA_KERNELS), the chunked
// matrix-form scan and the tree conv of kernels/cuda/ssm_tree_math.h also run
// here on the host, pass by pass in shuffled element order, against the CPU
// kernels: the GPU algorithm is checked even where no GPU is.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "core/tensor/backend.h"
#include "core/tensor/ssm_tree_batch.h"
#include "gtest/gtest.h"
#include "kernels/cpu/ssm_tree_ops.h"

#ifdef TREESPEC_HAVE_CUDA_KERNELS
namespace treespec::cuda {
inline float ToF(float x) { return x; }
template <typename T>
T FromF(float x);
template <>
inline float FromF<float>(float x) {
  return x;
}
}  // namespace treespec::cuda
#include "kernels/cuda/ssm_tree_layout.h"
#include "kernels/cuda/ssm_tree_math.h"
#endif

namespace treespec {
namespace {

struct Tol {
  double atol, rtol;
};

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

// Long root paths across the CUDA scan's chunk boundaries (depths 63 | 64,
// 127 | 128, ...): a chain of 320 on slot 0 with branches leaving it around
// depths 62-64 and 200, a chain of 70 on slot 2, a random tree of 40 on slot
// 1 whose nodes hang off earlier nodes at random. Outputs at the chain's end,
// at depths 63 (a chunk's last row) and 64, a branch leaf, the end of the
// second chain and a leaf of the tree.
SsmTreeBatch DeepBatch() {
  SsmTreeBatch b;
  std::vector<int32_t> p;
  for (int i = 0; i < 320; ++i) p.push_back(i - 1);
  for (int at : {61, 62, 63, 64, 200}) {  // a branch of 4 rows leaving row `at`
    const int first = static_cast<int>(p.size());
    p.push_back(at);
    for (int k = 1; k < 4; ++k) p.push_back(first + k - 1);
  }
  p.push_back(63);  // a second child of the row at depth 63
  const int32_t first_a = b.AddSequence(0, static_cast<int32_t>(p.size()), p);
  const int32_t first_b = b.AddSequence(2, 70, {});
  std::mt19937 rng(5);
  std::vector<int32_t> tree = {-1};
  for (int i = 1; i < 40; ++i) tree.push_back(static_cast<int32_t>(rng() % (i + 1)) - 1);
  const int32_t first_c = b.AddSequence(1, 40, tree);
  b.out_rows = {first_a + 319, first_a + 63, first_a + 64, first_a + 320 + 4 * 2 + 3,
                first_b + 69, first_c + 39};
  b.out_slots = {4, 5, 6, 7, 8, 9};
  return b;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& spec) {
  if (spec == "cpu") return CreateBackend("cpu");
  if (spec == "cuda_f32") return CreateCudaBackend(0, DType::kF32);
  if (spec == "cuda_f16") return CreateBackend("cuda");
  return CreateBackend("cuda:bf16");
}

// Members are public: the Check* helpers below drive the fixture.
class SsmTreeOpsTest : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    auto b = MakeBackend(GetParam());
    if (!b.ok()) {
      if (GetParam() == "cpu") FAIL() << b.status();
      const std::string why(b.status().message());
      GTEST_SKIP() << (absl::StartsWith(why, "no CUDA device") ? "" : "no CUDA device: ") << why;
    }
    be_ = std::move(*b);
    is_cuda_ = be_->device() == DeviceKind::kCuda;
    act_ = be_->activation_dtype();
    f32_tol_ = is_cuda_ ? Tol{1e-4, 1e-4} : Tol{2e-5, 2e-5};
    act_tol_ = act_ == DType::kF16 ? Tol{2e-3, 4e-3}
                                   : (act_ == DType::kBF16 ? Tol{1.5e-2, 1.6e-2} : f32_tol_);
  }
  Tensor Make(const std::vector<float>& v, Shape shape, DType dtype) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), Numel(shape));
    auto t = be_->Alloc(dtype, std::move(shape));
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(be_->Upload(v.data(), DType::kF32, &*t).ok());
    return *t;
  }
  // In the storage dtype; `v` becomes the values the backend holds.
  Tensor MakeAct(std::vector<float>* v, Shape shape) {
    Tensor t = Make(*v, std::move(shape), act_);
    *v = Get(t);
    return t;
  }
  Tensor Nan(const Shape& shape, DType dtype) {
    return Make(std::vector<float>(Numel(shape), std::nanf("")), shape, dtype);
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> f(t.numel());
    absl::Status s = be_->DownloadF32(t, f.data());
    EXPECT_TRUE(s.ok()) << s;
    return f;
  }
  void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                  const std::string& what, Tol tol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = std::fabs(got[i] - want[i]);
      if (!(err <= tol.atol + tol.rtol * std::fabs(want[i])) && ++bad <= 5) {
        ADD_FAILURE() << what << " [" << GetParam() << "] element " << i << ": got " << got[i]
                      << ", want " << want[i];
      }
      if (std::isfinite(err)) worst = std::max(worst, err);
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " out of tolerance";
    if (is_cuda_) std::cout << "[ measured ] " << what << " on " << GetParam() << ": max |err| " << worst << "\n";
  }

  std::unique_ptr<Backend> be_;
  bool is_cuda_ = false;
  DType act_ = DType::kF32;
  Tol f32_tol_{}, act_tol_{};
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
      if (a != r && more_children) {
        EXPECT_NE(b.buffer[a], b.buffer[r]) << "row " << r;
      }
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
  // Each output row and each output slot is written once (backends need not
  // agree on which of two writes wins).
  SsmTreeBatch same_row = MixedBatch();
  same_row.out_rows = {1, 1};
  same_row.out_slots = {1, 4};
  st = same_row.Plan(5);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "repeats a row or a slot")) << st;
  SsmTreeBatch same_slot = MixedBatch();
  same_slot.out_rows = {1, 2};
  same_slot.out_slots = {1, 1};
  EXPECT_EQ(same_slot.Plan(5).code(), absl::StatusCode::kInvalidArgument);
}

// ---- conv ----------------------------------------------------------------------

// Runs SsmTreeConv on `b` (planned over S slots) and checks it against the
// committed inputs, then the path's, of every row.
void CheckConv(SsmTreeOpsTest* t, const SsmTreeBatch& b, int Cd, int K, int S, uint32_t seed);

TEST_P(SsmTreeOpsTest, ConvTakesEachRowsRootPath) {
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 7};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(5).ok());
  CheckConv(this, b, 12, 4, 5, 1);
}

TEST_P(SsmTreeOpsTest, ConvOverDeepChainsAndManySequences) {
  SsmTreeBatch b = DeepBatch();
  ASSERT_TRUE(b.Plan(10).ok());
  CheckConv(this, b, 40, 4, 10, 11);
  SsmTreeBatch one = MixedBatch();  // K = 1: the row's own input only
  ASSERT_TRUE(one.Plan(5).ok());
  CheckConv(this, one, 7, 1, 5, 12);
}

// ---- scan --------------------------------------------------------------------------

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

// A scan's device inputs; Upload rounds c's activations to what they hold.
struct ScanTensors {
  Tensor xbc, dt, A, dt_bias, D;
};

ScanTensors UploadScan(SsmTreeOpsTest* t, ScanCase* c, int R);
// Runs SsmTreeScan on `b` with y and without, against ScanRef.
void CheckScan(SsmTreeOpsTest* t, const SsmTreeBatch& b, ScanCase c, const std::string& what);

TEST_P(SsmTreeOpsTest, ScanFollowsEachRowsRootPath) {
  SsmTreeBatch b = MixedBatch();
  b.out_rows = {2, 8};
  b.out_slots = {1, 4};
  ASSERT_TRUE(b.Plan(5).ok());
  ScanCase c;
  c.Fill(b.num_rows(), 10);
  c.params.dt_max = 1.5f;  // clamps some rows
  CheckScan(this, b, c, "mixed batch");
  // Shapes that do not fit are refused.
  const int R = b.num_rows(), H = c.H;
  ScanTensors in = UploadScan(this, &c, R);
  Tensor states = Make(c.states, {c.S, H, c.P, c.N}, DType::kF32);
  Tensor y = Nan({R, H * c.P}, act_);
  Tensor short_dt = Make(std::vector<float>(R * (H - 1)), {R, H - 1}, act_);
  EXPECT_EQ(be_->SsmTreeScan(in.xbc, short_dt, in.A, in.dt_bias, in.D, c.params, b, &states, &y).code(),
            absl::StatusCode::kInvalidArgument);
  SsmScanParams three = c.params;
  three.n_groups = 3;
  EXPECT_EQ(be_->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, three, b, &states, &y).code(),
            absl::StatusCode::kInvalidArgument);
  SsmTreeBatch unplanned = MixedBatch();
  EXPECT_EQ(be_->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, c.params, unplanned, &states, &y)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Prompt-length chains and trees deeper than the CUDA kernel's chunk, with
// states written out at, before and after chunk boundaries, dt clamped from
// below, n_groups > 1.
TEST_P(SsmTreeOpsTest, ScanOverDeepChainsAndBranchesAcrossChunks) {
  SsmTreeBatch b = DeepBatch();
  ASSERT_TRUE(b.Plan(10).ok());
  ScanCase c;
  c.S = 10;
  c.Fill(b.num_rows(), 20);
  c.params.dt_min = 0.05f;
  CheckScan(this, b, c, "deep batch");
}

// Model-sized heads (P, N not multiples of the warp), three groups.
TEST_P(SsmTreeOpsTest, ScanWithWideHeads) {
  SsmTreeBatch b;
  b.AddSequence(1, 9, {-1, 0, 0, 1, 1, 2, 5, 6, 3});
  b.AddSequence(0, 5, {});
  b.out_rows = {7, 13};
  b.out_slots = {2, 3};
  ASSERT_TRUE(b.Plan(4).ok());
  ScanCase c;
  c.H = 6;
  c.G = 3;
  c.P = 72;
  c.N = 40;
  c.S = 4;
  c.Fill(b.num_rows(), 40);
  CheckScan(this, b, c, "wide heads");
}

// Empty batches, and a batch with neither y nor outputs, change nothing.
TEST_P(SsmTreeOpsTest, EmptyBatchesAreNoOps) {
  ScanCase c;
  c.Fill(0, 60);
  ScanTensors in = UploadScan(this, &c, 0);
  Tensor states = Make(c.states, {c.S, c.H, c.P, c.N}, DType::kF32);
  Tensor y = Nan({0, c.H * c.P}, act_);
  SsmTreeBatch empty;
  ASSERT_TRUE(empty.Plan(c.S).ok());
  EXPECT_TRUE(be_->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, c.params, empty, &states, &y).ok());
  Tensor x = Make({}, {0, 6}, act_), w = Make(Rand(12, 61), {6, 2}, act_), bias = Make(Rand(6, 62), {6}, act_);
  Tensor conv_states = Make(Rand(c.S * 12, 63), {c.S, 6, 2}, act_), out = Nan({0, 6}, act_);
  const std::vector<float> conv_before = Get(conv_states);
  EXPECT_TRUE(be_->SsmTreeConv(x, w, bias, empty, &conv_states, &out).ok());
  SsmTreeBatch b = MixedBatch();
  ASSERT_TRUE(b.Plan(c.S).ok());
  ScanCase d;
  d.Fill(b.num_rows(), 64);
  ScanTensors din = UploadScan(this, &d, b.num_rows());
  EXPECT_TRUE(be_->SsmTreeScan(din.xbc, din.dt, din.A, din.dt_bias, din.D, d.params, b, &states, nullptr)
                  .ok());
  EXPECT_EQ(Get(states), c.states);
  EXPECT_EQ(Get(conv_states), conv_before);
}

// Every row of a tree equals feeding its path one token at a time, each
// step its own call whose state the next call starts from: bit for bit on
// the CPU, the property greedy speculation rests on; within tolerance on
// CUDA (matrix form against single steps).
TEST_P(SsmTreeOpsTest, TreeRowsEqualOneTokenSteps) {
  SsmTreeBatch tree;
  tree.AddSequence(0, 7, {-1, 0, 0, 1, 1, 2, 5});
  ASSERT_TRUE(tree.Plan(2).ok());
  ScanCase c;
  c.S = 2;
  c.Fill(tree.num_rows(), 30);
  const int R = tree.num_rows(), H = c.H, P = c.P, N = c.N, W = c.W();
  ScanTensors in = UploadScan(this, &c, R);
  Tensor y = Nan({R, H * P}, act_);
  Tensor states = Make(c.states, {c.S, H, P, N}, DType::kF32);
  ASSERT_TRUE(be_->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, c.params, tree, &states, &y).ok());
  const std::vector<float> tree_y = Get(y);
  for (int r = 0; r < R; ++r) {
    // Slots 0 and 1 take turns: each step reads one and writes the other.
    Tensor st = Make(c.states, {c.S, H, P, N}, DType::kF32);
    std::vector<float> step_y;
    int from = 0;
    for (int j : PathOf(tree, r)) {
      SsmTreeBatch one;
      one.AddSequence(from, 1, {});
      one.out_rows = {0};
      one.out_slots = {1 - from};
      ASSERT_TRUE(one.Plan(2).ok());
      Tensor x1 = Make(std::vector<float>(c.xbc.begin() + j * W, c.xbc.begin() + (j + 1) * W), {1, W}, act_);
      Tensor d1 = Make(std::vector<float>(c.dt.begin() + j * H, c.dt.begin() + (j + 1) * H), {1, H}, act_);
      Tensor y1 = Nan({1, H * P}, act_);
      ASSERT_TRUE(be_->SsmTreeScan(x1, d1, in.A, in.dt_bias, in.D, c.params, one, &st, &y1).ok());
      step_y = Get(y1);
      from = 1 - from;
    }
    if (!is_cuda_) {
      for (int k = 0; k < H * P; ++k) {
        ASSERT_EQ(tree_y[r * H * P + k], step_y[k]) << "row " << r << " element " << k;
      }
      continue;
    }
    const std::vector<double> want(step_y.begin(), step_y.end());
    // Both sides rounded to the storage dtype once: twice the output bound.
    ExpectNear(std::vector<float>(tree_y.begin() + r * H * P, tree_y.begin() + (r + 1) * H * P), want,
               "tree row " + std::to_string(r) + " vs one-token steps",
               {2 * act_tol_.atol, 2 * act_tol_.rtol});
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

// ---- gated RMSNorm ----------------------------------------------------------------------

TEST_P(SsmTreeOpsTest, GatedRmsNormPerGroupAlsoInPlace) {
  // (rows, width, group): small groups, a group wider than a block, one group.
  for (auto [R, W, group] : {std::tuple{3, 12, 4}, {5, 1200, 600}, {2, 96, 96}, {4, 100, 20}}) {
    const std::string what = "R " + std::to_string(R) + " W " + std::to_string(W) + " group " +
                             std::to_string(group);
    std::vector<float> ys = Rand(R * W, 70), zs = Rand(R * W, 71, -3.0f, 3.0f), ws = Rand(W, 72);
    Tensor y = MakeAct(&ys, {R, W}), z = MakeAct(&zs, {R, W}), w = MakeAct(&ws, {W});
    Tensor ss = Nan({R, W / group}, DType::kF32);
    ASSERT_TRUE(be_->GateSumSquares(y, z, group, &y, &ss).ok()) << what;  // g aliases y
    std::vector<double> g(R * W), ref_ss(R * W / group, 0.0), ref(R * W);
    for (int i = 0; i < R * W; ++i) {
      g[i] = ys[i] * zs[i] / (1 + std::exp(-double{zs[i]}));
      ref_ss[(i / W) * (W / group) + (i % W) / group] += g[i] * g[i];
    }
    ExpectNear(Get(y), g, "gate, " + what, act_tol_);
    ExpectNear(Get(ss), ref_ss, "sums of squares, " + what, f32_tol_);
    for (int count : {group, 2 * W}) {  // 2·W: a tensor-parallel shard's sums cover more columns
      for (int i = 0; i < R * W; ++i) {
        ref[i] = ws[i % W] * g[i] /
                 std::sqrt(ref_ss[(i / W) * (W / group) + (i % W) / group] / count + 1e-5);
      }
      Tensor out = Nan({R, W}, act_);
      ASSERT_TRUE(be_->GroupRmsScale(y, ss, w, count, 1e-5f, &out).ok()) << what;
      // g was rounded to the storage dtype before the scale: two roundings.
      ExpectNear(Get(out), ref, "gated rmsnorm, count " + std::to_string(count) + ", " + what,
                 {2 * act_tol_.atol, 2 * act_tol_.rtol});
    }
    ASSERT_TRUE(be_->GroupRmsScale(y, ss, w, group, 1e-5f, &y).ok()) << what;  // in place
    for (int i = 0; i < R * W; ++i) {
      ref[i] = ws[i % W] * g[i] / std::sqrt(ref_ss[(i / W) * (W / group) + (i % W) / group] / group + 1e-5);
    }
    ExpectNear(Get(y), ref, "gated rmsnorm in place, " + what, {2 * act_tol_.atol, 2 * act_tol_.rtol});
  }
  Tensor y = Nan({2, 12}, act_), ss = Nan({2, 5}, DType::kF32);
  EXPECT_EQ(be_->GateSumSquares(y, y, 5, &y, &ss).code(), absl::StatusCode::kInvalidArgument);
}

// ---- partial rotary --------------------------------------------------------------

// Partial rotary (Bamba): the first Rd columns of each head rotate, the rest
// pass; k and v land in the cache slots of the plan.
TEST_P(SsmTreeOpsTest, QkvRopeRotatesOnlyTheRotaryColumns) {
  // (H, Hkv, Dh, Rd / 2); Rd / 2 = 0: no rotation at all.
  // (Plain variables, not a structured binding: clang 14, which the sanitizer
  // builds use, cannot capture a binding in the lambda below.)
  for (const auto& dims : {std::tuple{2, 1, 8, 2}, {4, 2, 12, 3}, {2, 2, 16, 8}, {2, 1, 6, 0}}) {
    const int H = std::get<0>(dims), Hkv = std::get<1>(dims), Dh = std::get<2>(dims);
    const int rot_half = std::get<3>(dims);
    const std::string what = "Dh " + std::to_string(Dh) + " Rd " + std::to_string(2 * rot_half);
    const int T = 3, bs = 4;
    AttentionBatch batch;
    batch.num_seqs = 1;
    batch.block_size = bs;
    batch.max_blocks_per_seq = 1;
    batch.query_start = {0, T};
    batch.context_lens = {0};
    batch.prior_lens = {0};
    batch.block_tables = {1};  // slots 4..7
    batch.mask_offset = {-1};
    const int W = (H + 2 * Hkv) * Dh;
    std::vector<float> xs = Rand(T * W, 80);
    std::vector<float> inv(rot_half);
    for (int i = 0; i < rot_half; ++i) inv[i] = std::pow(10000.0f, -static_cast<float>(i) / rot_half);
    const std::vector<int32_t> pos = {3, 7, 1999};
    Tensor qkv = MakeAct(&xs, {T, W});
    Tensor inv_t = Make(inv, {rot_half}, DType::kF32);
    auto positions = be_->Alloc(DType::kI32, {T});
    ASSERT_TRUE(positions.ok());
    ASSERT_TRUE(be_->Upload(pos.data(), DType::kI32, &*positions).ok());
    auto plan = be_->PlanAttention(batch);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor q = Nan({T, H, Dh}, act_), kc = Nan({2 * bs, Hkv, Dh}, act_), vc = Nan({2 * bs, Hkv, Dh}, act_);
    absl::Status st = be_->QkvRope(qkv, *positions, inv_t, **plan, &q, &kc, &vc);
    ASSERT_TRUE(st.ok()) << st << " " << what;
    std::vector<double> ref_q(T * H * Dh);
    std::vector<double> ref_k(2 * bs * Hkv * Dh, std::nan("")), ref_v(ref_k);
    auto rotate = [&](const float* x, int t, double* out) {
      for (int d = 2 * rot_half; d < Dh; ++d) out[d] = x[d];
      for (int i = 0; i < rot_half; ++i) {
        const double a = static_cast<float>(pos[t]) * inv[i];
        out[i] = x[i] * std::cos(a) - x[i + rot_half] * std::sin(a);
        out[i + rot_half] = x[i + rot_half] * std::cos(a) + x[i] * std::sin(a);
      }
    };
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) rotate(&xs[t * W + h * Dh], t, &ref_q[(t * H + h) * Dh]);
      for (int g = 0; g < Hkv; ++g) {
        rotate(&xs[t * W + (H + g) * Dh], t, &ref_k[((bs + t) * Hkv + g) * Dh]);
        for (int d = 0; d < Dh; ++d) ref_v[((bs + t) * Hkv + g) * Dh + d] = xs[t * W + (H + Hkv + g) * Dh + d];
      }
    }
    ExpectNear(Get(q), ref_q, "partial rotary q, " + what, act_tol_);
    // Only the plan's slots are written; the rest stay NaN.
    const std::vector<float> k = Get(kc), v = Get(vc);
    for (size_t i = 0; i < k.size(); ++i) {
      if (std::isnan(ref_k[i])) {
        EXPECT_TRUE(std::isnan(k[i]) && std::isnan(v[i])) << what << " cache element " << i;
        continue;
      }
      EXPECT_LE(std::fabs(k[i] - ref_k[i]), act_tol_.atol + act_tol_.rtol * std::fabs(ref_k[i]))
          << what << " k cache element " << i;
      EXPECT_EQ(v[i], ref_v[i]) << what << " v cache element " << i;
    }
  }
}

void CheckConv(SsmTreeOpsTest* t, const SsmTreeBatch& b, int Cd, int K, int S, uint32_t seed) {
  const int R = b.num_rows();
  std::vector<float> xs = Rand(R * Cd, seed), ws = Rand(Cd * K, seed + 1), bs = Rand(Cd, seed + 2),
                     st = Rand(S * Cd * K, seed + 3);
  Backend* be = t->be_.get();
  Tensor x = t->MakeAct(&xs, {R, Cd}), w = t->MakeAct(&ws, {Cd, K}), bias = t->MakeAct(&bs, {Cd});
  Tensor states = t->MakeAct(&st, {S, Cd, K}), out = t->Nan({R, Cd}, t->act_);
  absl::Status status = be->SsmTreeConv(x, w, bias, b, &states, &out);
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
  t->ExpectNear(t->Get(out), ref, "conv out", t->act_tol_);
  t->ExpectNear(t->Get(states), ref_states, "conv states (outputs written, the rest untouched)",
                {0, 0});
}

ScanTensors UploadScan(SsmTreeOpsTest* t, ScanCase* c, int R) {
  ScanTensors in;
  in.xbc = t->MakeAct(&c->xbc, {R, c->W()});
  in.dt = t->MakeAct(&c->dt, {R, c->H});
  in.A = t->Make(c->A, {c->H}, DType::kF32);
  in.dt_bias = t->Make(c->dt_bias, {c->H}, DType::kF32);
  in.D = t->Make(c->D, {c->H}, DType::kF32);
  return in;
}

void CheckScan(SsmTreeOpsTest* t, const SsmTreeBatch& b, ScanCase c, const std::string& what) {
  Backend* be = t->be_.get();
  const int R = b.num_rows(), H = c.H, P = c.P, N = c.N;
  ScanTensors in = UploadScan(t, &c, R);
  Tensor y = t->Nan({R, H * P}, t->act_);
  Tensor states = t->Make(c.states, {c.S, H, P, N}, DType::kF32);
  absl::Status st = be->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, c.params, b, &states, &y);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> ref_y, ref_states;
  ScanRef(c, b, &ref_y, &ref_states);
  t->ExpectNear(t->Get(y), ref_y, what + ": scan y", t->act_tol_);
  t->ExpectNear(t->Get(states), ref_states, what + ": scan states", t->f32_tol_);
  // States alone (y null), as activation replay runs it: the same states.
  Tensor again = t->Make(c.states, {c.S, H, P, N}, DType::kF32);
  st = be->SsmTreeScan(in.xbc, in.dt, in.A, in.dt_bias, in.D, c.params, b, &again, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(t->Get(again), t->Get(states)) << what;
}

INSTANTIATE_TEST_SUITE_P(Backends, SsmTreeOpsTest,
                         ::testing::Values("cpu", "cuda_f32", "cuda_f16", "cuda_bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

#ifdef TREESPEC_HAVE_CUDA_KERNELS
// ---- the CUDA kernels' math, on the host ------------------------------------------------

// Runs every element of a pass, in reverse or shuffled order: a pass whose
// elements depended on each other would fail.
struct HostRunner {
  std::mt19937* rng;
  int order;
  template <typename Op>
  int operator()(int64_t n, const Op& op) const {
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    if (order == 1) std::reverse(idx.begin(), idx.end());
    if (order == 2) std::shuffle(idx.begin(), idx.end(), *rng);
    for (int64_t e : idx) op(e);
    return 0;
  }
};

// A random batch: 1-3 sequences, each a chain, a random tree or a bushy
// chain, some 300 rows deep; outputs on distinct rows (the CPU kernels write
// one slot per row).
SsmTreeBatch RandomBatch(std::mt19937& rng, int trial) {
  SsmTreeBatch b;
  const int num_seqs = 1 + rng() % 3;
  for (int s = 0; s < num_seqs; ++s) {
    const int n = 1 + rng() % (trial % 5 == 0 ? 300 : 20);
    const int kind = rng() % 3;
    std::vector<int32_t> parents;
    for (int i = 0; i < n; ++i) {
      if (kind == 0) {
        parents.push_back(i - 1);
      } else if (kind == 1) {
        parents.push_back(i == 0 ? -1 : static_cast<int>(rng() % (i + 1)) - 1);
      } else {
        parents.push_back(i == 0 ? -1 : std::max<int>(-1, i - 1 - static_cast<int>(rng() % 3)));
      }
    }
    b.AddSequence(s, n, parents);
  }
  const int num_out = rng() % 4;
  for (int o = 0; o < num_out; ++o) {
    const int r = rng() % b.num_rows();
    if (std::find(b.out_rows.begin(), b.out_rows.end(), r) != b.out_rows.end()) continue;
    b.out_rows.push_back(r);
    b.out_slots.push_back(4 + o);
  }
  return b;
}

TEST(CudaTreeMathOnHostTest, ChunkedMatrixFormAndConvMatchTheCpuKernels) {
  std::mt19937 rng(1);
  double worst = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const HostRunner run{&rng, trial % 3};
    const int S = 8;
    SsmTreeBatch b = RandomBatch(rng, trial);
    ASSERT_TRUE(b.Plan(S).ok());
    const int R = b.num_rows();
    ScanCase c;
    c.H = 1 + rng() % 4;
    c.G = c.H % 2 == 0 && rng() % 2 ? 2 : 1;
    c.P = 1 + rng() % 5;
    c.N = 1 + rng() % 6;
    c.S = S;
    c.Fill(R, 100 + trial);
    if (trial % 4 == 1) c.params.dt_max = 1.2f;
    if (trial % 4 == 2) c.params.dt_min = 0.3f;
    const int H = c.H, P = c.P, N = c.N, G = c.G;
    std::vector<float> y_ref(R * H * P), st_ref = c.states;
    cpu::SsmTreeScan(c.xbc.data(), c.dt.data(), c.A.data(), c.dt_bias.data(), c.D.data(), c.params,
                     {H, P, N}, b, st_ref.data(), y_ref.data());
    // Chunks from 1 (every row an anchor) up; every 7th trial as the backend
    // picks it, under a budget small enough to make it grow.
    const int chunk = std::vector<int>{1, 2, 3, 5, 64, 7}[trial % 6];
    const cuda::SsmScanLayout l = trial % 7 == 0 ? cuda::LayoutSsmTreeScan(b, H * P * N, 1000)
                                                 : cuda::LayoutSsmTreeScanWithChunk(b, chunk);
    cuda::ssm::ScanArgs<float> a;
    a.xbc = c.xbc.data();
    a.dt_raw = c.dt.data();
    a.A = c.A.data();
    a.dt_bias = c.dt_bias.data();
    a.D = c.D.data();
    a.dt_min = c.params.dt_min;
    a.dt_max = c.params.dt_max;
    a.H = H;
    a.P = P;
    a.N = N;
    a.G = G;
    std::vector<float> states = c.states, y(R * H * P, std::nanf(""));
    a.states = states.data();
    a.y = y.data();
    const int32_t* base = l.packed.data();
    a.ix.parent = base + l.parent;
    a.ix.slot = base + l.slot;
    a.ix.seg_off = base + l.seg_off;
    a.ix.seg_len = base + l.seg_len;
    a.ix.start = base + l.start;
    a.ix.state_row = base + l.state_row;
    a.ix.state_off = base + l.state_off;
    a.ix.out_state = base + l.out_state;
    a.ix.out_slot = base + l.out_slot;
    a.ix.num_rows = l.num_rows;
    a.ix.num_states = l.num_states;
    a.ix.num_out = l.num_out;
    a.ix.num_entries = l.num_entries;
    a.ix.num_state_entries = l.num_state_entries;
    const float nan = std::nanf("");
    std::vector<int32_t> seg(l.num_entries, -7), owner(l.num_entries, -7);
    std::vector<float> dt(R * H, nan), logd(R * H, nan), coef(l.num_state_entries * H, nan),
        full(static_cast<size_t>(l.num_states) * H * P * N, nan), cb(l.num_entries * G, nan);
    a.s = {seg.data(), owner.data(), dt.data(), logd.data(), coef.data(), full.data(), cb.data()};
    ASSERT_EQ(cuda::ssm::RunScan(a, run), 0);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], y_ref[i], 2e-5 + 2e-5 * std::fabs(y_ref[i])) << "y element " << i;
      worst = std::max(worst, double{std::fabs(y[i] - y_ref[i])});
    }
    for (size_t i = 0; i < states.size(); ++i) {
      ASSERT_NEAR(states[i], st_ref[i], 2e-5 + 2e-5 * std::fabs(st_ref[i])) << "state element " << i;
    }
    std::vector<float> states_alone = c.states;
    a.states = states_alone.data();
    a.y = nullptr;
    ASSERT_EQ(cuda::ssm::RunScan(a, run), 0);
    EXPECT_EQ(states_alone, states);

    const int Cd = 1 + rng() % 7, K = 1 + rng() % 5;
    const std::vector<float> x = Rand(R * Cd, 200 + trial), w = Rand(Cd * K, 300 + trial),
                             bias = Rand(Cd, 400 + trial), conv_st = Rand(S * Cd * K, 500 + trial);
    std::vector<float> out_ref(R * Cd), conv_ref = conv_st, out(R * Cd, nan), conv_got = conv_st;
    cpu::SsmTreeConv(x.data(), Cd, w.data(), bias.data(), K, b, conv_ref.data(), out_ref.data());
    const cuda::SsmConvLayout cl = cuda::LayoutSsmTreeConv(b, K);
    cuda::ssm::ConvArgs<float> ca;
    ca.x = x.data();
    ca.w = w.data();
    ca.b = bias.data();
    ca.states = conv_got.data();
    ca.out = out.data();
    ca.Cd = Cd;
    ca.ix = {cl.packed.data() + cl.src, cl.packed.data() + cl.slot, cl.packed.data() + cl.out_row,
             cl.packed.data() + cl.out_slot, cl.num_rows, cl.K, cl.num_out};
    ASSERT_EQ(cuda::ssm::RunConv(ca, run), 0);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], out_ref[i], 1e-6 + 1e-6 * std::fabs(out_ref[i])) << "conv element " << i;
    }
    EXPECT_EQ(conv_got, conv_ref);
  }
  std::cout << "chunked matrix form (host) vs recurrence: max |dy| = " << worst << "\n";
}

TEST(CudaTreeMathOnHostTest, LayoutChunksAnchorsAndOutputs) {
  SsmTreeBatch b;
  b.AddSequence(1, 10, {});                     // depths 0..9
  b.AddSequence(0, 4, {-1, 0, 1, 1});           // depths 0, 1, 2, 2
  b.out_rows = {3, 12};
  b.out_slots = {3, 2};
  ASSERT_TRUE(b.Plan(4).ok());
  EXPECT_TRUE(cuda::CheckSsmTreeBatch("test", b, 14, 4).ok());
  EXPECT_EQ(cuda::CheckSsmTreeBatch("test", b, 14, 2).code(), absl::StatusCode::kInvalidArgument);
  SsmTreeBatch unplanned = b;
  unplanned.buffer.clear();
  EXPECT_EQ(cuda::CheckSsmTreeBatch("test", unplanned, 14, 4).code(),
            absl::StatusCode::kInvalidArgument);
  const cuda::SsmScanLayout l = cuda::LayoutSsmTreeScanWithChunk(b, 4);
  const int32_t* p = l.packed.data();
  // Anchors with children: rows at depth 3 and 7 of the chain (rows 3, 7);
  // outputs: row 3 into slot 3, row 12 into slot 2.
  EXPECT_EQ(l.num_states, 3);
  EXPECT_EQ(std::vector<int32_t>(p + l.state_row, p + l.state_row + l.num_states),
            (std::vector<int32_t>{3, 7, 12}));
  EXPECT_EQ(l.num_out, 2);
  EXPECT_EQ(std::vector<int32_t>(p + l.out_slot, p + l.out_slot + 2), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(std::vector<int32_t>(p + l.out_state, p + l.out_state + 2), (std::vector<int32_t>{0, 2}));
  // Row 9 (depth 9): segment rows 8, 9 after anchor row 7 (state 1).
  EXPECT_EQ(p[l.seg_len + 9], 2);
  EXPECT_EQ(p[l.start + 9], 1);
  EXPECT_EQ(p[l.start + 3], -1);
  EXPECT_EQ(p[l.seg_len + 3], 4);
  EXPECT_EQ(p[l.start + 13], -1);
  EXPECT_EQ(p[l.seg_len + 13], 3);
  // The chunk grows until the state rows fit the budget.
  SsmTreeBatch chain;
  chain.AddSequence(0, 1000, {});
  ASSERT_TRUE(chain.Plan(1).ok());
  EXPECT_EQ(cuda::LayoutSsmTreeScan(chain, 10, 1 << 20).chunk, cuda::kMinScanChunk);
  EXPECT_EQ(cuda::LayoutSsmTreeScan(chain, 10, 7 * 10 * 4).chunk, 128);  // 7 anchors
  EXPECT_EQ(cuda::LayoutSsmTreeScan(chain, 10, 0).chunk, cuda::kMaxScanChunk);
}
#endif  // TREESPEC_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace treespec
