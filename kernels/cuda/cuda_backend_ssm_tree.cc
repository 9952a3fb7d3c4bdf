// CudaBackend's Mamba-2 ops over packed token trees (STree, paper 001 §3):
// shape and batch checks, the batch's layout (ssm_tree_layout.h) uploaded as
// one i32 buffer, scratch, then the launchers of ssm_tree_conv.h,
// ssm_tree_scan.h and gated_norm.h. These ops upload and allocate, so they
// cannot run inside a graph capture (FAILED_PRECONDITION there).
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/gated_norm.h"
#include "kernels/cuda/ssm_tree_conv.h"
#include "kernels/cuda/ssm_tree_layout.h"
#include "kernels/cuda/ssm_tree_scan.h"

namespace treespec::cuda {
namespace {

// The scan's state rows (anchors of long paths, outputs) may hold this much
// f32 state before the chunk grows (ssm_tree_layout.h).
constexpr int64_t kScanStateBudgetBytes = int64_t{128} << 20;

absl::Status TooLarge(const char* op, int64_t entries) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "cuda backend: ", op, ": the batch's root-path segments have ", entries,
      " entries, more than one call indexes; split the batch"));
}

}  // namespace

absl::Status CudaBackend::SsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                      const SsmTreeBatch& batch, Tensor* states, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&x, &w, &b, states, out}, "ssm tree conv"));
  if (x.rank() != 2 || w.rank() != 2 || states->rank() != 3) {
    return ShapeError("SsmTreeConv", {&x, &w, &b, states, out});
  }
  const int64_t R = x.dim(0), Cd = w.dim(0), K = w.dim(1), S = states->dim(0);
  if (K < 1 || x.dim(1) != Cd || b.numel() != Cd || states->dim(1) != Cd ||
      states->dim(2) != K || out->shape() != Shape{R, Cd}) {
    return ShapeError("SsmTreeConv", {&x, &w, &b, states, out});
  }
  TS_RETURN_IF_ERROR(CheckSsmTreeBatch("SsmTreeConv", batch, R, S));
  if (R == 0 || Cd == 0) return absl::OkStatus();
  const SsmConvLayout layout = LayoutSsmTreeConv(batch, static_cast<int>(K));
  TS_ASSIGN_OR_RETURN(Tensor index, UploadIndex(layout.packed));
  const int32_t* base = index.data<int32_t>();
  ssm::ConvIndex ix;
  ix.src = base + layout.src;
  ix.slot = base + layout.slot;
  ix.out_row = base + layout.out_row;
  ix.out_slot = base + layout.out_slot;
  ix.num_rows = layout.num_rows;
  ix.K = layout.K;
  ix.num_out = layout.num_out;
  TS_CUDA_RETURN_IF_ERROR(LaunchSsmTreeConv(dtype_, x.raw(), Cd, w.raw(), b.raw(), ix,
                                            states->raw(), out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                                      const Tensor& dt_bias, const Tensor& D,
                                      const SsmScanParams& params, const SsmTreeBatch& batch,
                                      Tensor* states, Tensor* y) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&xbc, &dt_raw}, "ssm tree scan"));
  if (y != nullptr) TS_RETURN_IF_ERROR(Check(*y, dtype_, "ssm tree scan y"));
  TS_RETURN_IF_ERROR(CheckAllF32({&A, &dt_bias, &D, states}, "ssm tree scan"));
  if (states->rank() != 4 || xbc.rank() != 2) {
    return ShapeError("SsmTreeScan", {&xbc, &dt_raw, states});
  }
  const int64_t S = states->dim(0), H = states->dim(1), P = states->dim(2), N = states->dim(3);
  const int64_t G = params.n_groups, R = xbc.dim(0);
  if (G < 1 || H < 1 || H % G != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: SsmTreeScan n_groups ", G,
                                                   " does not divide ", H, " heads"));
  }
  if (P < 1 || N < 1 || xbc.dim(1) != H * P + 2 * G * N || dt_raw.shape() != Shape{R, H} ||
      A.numel() != H || dt_bias.numel() != H || D.numel() != H ||
      (y != nullptr && y->shape() != Shape{R, H * P})) {
    return ShapeError("SsmTreeScan", {&xbc, &dt_raw, &A, &dt_bias, &D, states});
  }
  TS_RETURN_IF_ERROR(CheckSsmTreeBatch("SsmTreeScan", batch, R, S));
  if (R == 0 || (y == nullptr && batch.out_rows.empty())) return absl::OkStatus();
  const SsmScanLayout layout = LayoutSsmTreeScan(batch, H * P * N, kScanStateBudgetBytes);
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  if (layout.num_entries > kMaxIndex || layout.num_state_entries > kMaxIndex) {
    return TooLarge("SsmTreeScan", layout.num_entries);
  }
  TS_ASSIGN_OR_RETURN(Tensor index, UploadIndex(layout.packed));
  const int32_t* base = index.data<int32_t>();
  ssm::ScanIndex ix;
  ix.parent = base + layout.parent;
  ix.slot = base + layout.slot;
  ix.seg_off = base + layout.seg_off;
  ix.seg_len = base + layout.seg_len;
  ix.start = base + layout.start;
  ix.state_row = base + layout.state_row;
  ix.state_off = base + layout.state_off;
  ix.out_state = base + layout.out_state;
  ix.out_slot = base + layout.out_slot;
  ix.num_rows = layout.num_rows;
  ix.num_states = layout.num_states;
  ix.num_out = layout.num_out;
  ix.num_entries = layout.num_entries;
  ix.num_state_entries = layout.num_state_entries;
  // Scratch: seg | owner (i32), then dt | logd | coef | full | cb (f32).
  const int64_t E = layout.num_entries, RH = R * H;
  TS_ASSIGN_OR_RETURN(Tensor iscratch, Scratch(DType::kI32, {2 * E}));
  const int64_t coef_n = layout.num_state_entries * H, full_n = layout.num_states * H * P * N;
  const int64_t cb_n = y != nullptr ? E * G : 0;
  TS_ASSIGN_OR_RETURN(Tensor fscratch,
                      Scratch(DType::kF32, {2 * RH + coef_n + full_n + cb_n}));
  ssm::ScanScratch sc;
  sc.seg = iscratch.data<int32_t>();
  sc.owner = sc.seg + E;
  sc.dt = fscratch.data<float>();
  sc.logd = sc.dt + RH;
  sc.coef = sc.logd + RH;
  sc.full = sc.coef + coef_n;
  sc.cb = y != nullptr ? sc.full + full_n : nullptr;
  TS_CUDA_RETURN_IF_ERROR(LaunchSsmTreeScan(
      dtype_, xbc.raw(), dt_raw.raw(), A.data<float>(), dt_bias.data<float>(), D.data<float>(),
      params.dt_min, params.dt_max, static_cast<int>(H), static_cast<int>(P), static_cast<int>(N),
      static_cast<int>(G), ix, sc, states->data<float>(), y != nullptr ? y->raw() : nullptr,
      stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::GateSumSquares(const Tensor& y, const Tensor& z, int64_t group,
                                         Tensor* g, Tensor* ss) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&y, &z, g}, "gate sum squares"));
  TS_RETURN_IF_ERROR(Check(*ss, DType::kF32, "gate sum squares ss"));
  if (y.rank() != 2 || group < 1 || y.dim(1) % group != 0 || z.shape() != y.shape() ||
      g->shape() != y.shape() || ss->shape() != Shape{y.dim(0), y.dim(1) / group}) {
    return ShapeError("GateSumSquares", {&y, &z, g, ss});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchGateSumSquares(dtype_, y.raw(), z.raw(), y.dim(0), y.dim(1), group,
                                               g->raw(), ss->data<float>(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::GroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w,
                                        int64_t count, float eps, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&g, &w, out}, "group rms scale"));
  TS_RETURN_IF_ERROR(Check(ss, DType::kF32, "group rms scale ss"));
  if (g.rank() != 2 || ss.rank() != 2 || ss.dim(0) != g.dim(0) || ss.dim(1) < 1 ||
      g.dim(1) < ss.dim(1) || g.dim(1) % ss.dim(1) != 0 || count < g.dim(1) / ss.dim(1) || w.numel() != g.dim(1) ||
      out->shape() != g.shape()) {
    return ShapeError("GroupRmsScale", {&g, &ss, &w, out});
  }
  const int64_t group = g.dim(1) / ss.dim(1);
  TS_CUDA_RETURN_IF_ERROR(LaunchGroupRmsScale(dtype_, g.raw(), ss.data<float>(), w.raw(), g.dim(0),
                                              g.dim(1), group, count, eps, out->raw(), stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
