#include "kernels/cpu/cpu_backend_ssm.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec::cpu {
namespace {

absl::Status Want(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  if (t.device() != DeviceKind::kCpu || t.dtype() != DType::kF32 || t.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: ", op, " ", name, " must be f32 ",
                                                   ShapeString(shape), ", got ", t.DebugString()));
  }
  return absl::OkStatus();
}

// The batch is planned and its slots fit a pool of `S` states.
absl::Status CheckBatch(const char* op, const SsmTreeBatch& batch, int64_t R, int64_t S) {
  bool ok = batch.num_rows() == R && static_cast<int64_t>(batch.buffer.size()) == R &&
            batch.slot.size() == batch.parent.size() &&
            batch.out_rows.size() == batch.out_slots.size();
  for (int32_t s : batch.slot) ok = ok && s >= 0 && s < S;
  for (size_t i = 0; ok && i < batch.out_rows.size(); ++i) {
    ok = batch.out_rows[i] >= 0 && batch.out_rows[i] < R && batch.out_slots[i] >= 0 &&
         batch.out_slots[i] < S;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: ", op, ": the batch (",
                                                   batch.num_rows(), " rows) is not a planned "
                                                   "batch of ", R, " rows over ", S, " slots"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckedSsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                const SsmTreeBatch& batch, Tensor* states, Tensor* out) {
  if (w.rank() != 2 || states->rank() != 3 || x.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: SsmTreeConv shapes x ",
                                                   x.DebugString(), " w ", w.DebugString(),
                                                   " states ", states->DebugString()));
  }
  const int64_t R = x.dim(0), Cd = w.dim(0), K = w.dim(1), S = states->dim(0);
  TS_RETURN_IF_ERROR(Want("SsmTreeConv", "x", x, {R, Cd}));
  TS_RETURN_IF_ERROR(Want("SsmTreeConv", "b", b, {Cd}));
  TS_RETURN_IF_ERROR(Want("SsmTreeConv", "states", *states, {S, Cd, K}));
  TS_RETURN_IF_ERROR(Want("SsmTreeConv", "out", *out, {R, Cd}));
  TS_RETURN_IF_ERROR(Want("SsmTreeConv", "w", w, {Cd, K}));
  TS_RETURN_IF_ERROR(CheckBatch("SsmTreeConv", batch, R, S));
  SsmTreeConv(x.data<float>(), static_cast<int>(Cd), w.data<float>(), b.data<float>(),
              static_cast<int>(K), batch, states->data<float>(), out->data<float>());
  return absl::OkStatus();
}

absl::Status CheckedSsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                                const Tensor& dt_bias, const Tensor& D,
                                const SsmScanParams& params, const SsmTreeBatch& batch,
                                Tensor* states, Tensor* y, int threads) {
  if (states->rank() != 4 || xbc.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: SsmTreeScan states ",
                                                   states->DebugString(), " xbc ",
                                                   xbc.DebugString()));
  }
  const int64_t S = states->dim(0), H = states->dim(1), P = states->dim(2), N = states->dim(3);
  const int64_t G = params.n_groups, R = xbc.dim(0);
  if (G < 1 || H % G != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: SsmTreeScan n_groups ", G, " does not divide ", H, " heads"));
  }
  TS_RETURN_IF_ERROR(Want("SsmTreeScan", "xbc", xbc, {R, H * P + 2 * G * N}));
  TS_RETURN_IF_ERROR(Want("SsmTreeScan", "dt_raw", dt_raw, {R, H}));
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"A", &A}, {"dt_bias", &dt_bias},
                         {"D", &D}}) {
    TS_RETURN_IF_ERROR(Want("SsmTreeScan", name, *t, {H}));
  }
  TS_RETURN_IF_ERROR(Want("SsmTreeScan", "states", *states, {S, H, P, N}));
  if (y != nullptr) TS_RETURN_IF_ERROR(Want("SsmTreeScan", "y", *y, {R, H * P}));
  TS_RETURN_IF_ERROR(CheckBatch("SsmTreeScan", batch, R, S));
  SsmScanDims dims{static_cast<int>(H), static_cast<int>(P), static_cast<int>(N)};
  SsmTreeScan(xbc.data<float>(), dt_raw.data<float>(), A.data<float>(), dt_bias.data<float>(),
              D.data<float>(), params, dims, batch, states->data<float>(),
              y != nullptr ? y->data<float>() : nullptr, threads);
  return absl::OkStatus();
}

absl::Status CheckedGateSumSquares(const Tensor& y, const Tensor& z, int64_t group, Tensor* g,
                                   Tensor* ss) {
  if (y.rank() != 2 || group < 1 || y.dim(1) % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: GateSumSquares y ",
                                                   y.DebugString(), " in groups of ", group));
  }
  const int64_t R = y.dim(0), W = y.dim(1);
  TS_RETURN_IF_ERROR(Want("GateSumSquares", "y", y, {R, W}));
  TS_RETURN_IF_ERROR(Want("GateSumSquares", "z", z, {R, W}));
  TS_RETURN_IF_ERROR(Want("GateSumSquares", "g", *g, {R, W}));
  TS_RETURN_IF_ERROR(Want("GateSumSquares", "ss", *ss, {R, W / group}));
  GateSumSquares(y.data<float>(), z.data<float>(), static_cast<int>(R), static_cast<int>(W),
                 static_cast<int>(group), g->data<float>(), ss->data<float>());
  return absl::OkStatus();
}

absl::Status CheckedGroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w,
                                  int64_t count, float eps, Tensor* out) {
  if (g.rank() != 2 || ss.rank() != 2 || ss.dim(1) < 1 || g.dim(1) % ss.dim(1) != 0 ||
      count < g.dim(1) / ss.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: GroupRmsScale g ",
                                                   g.DebugString(), " ss ", ss.DebugString(),
                                                   " count ", count));
  }
  const int64_t R = g.dim(0), W = g.dim(1), group = W / ss.dim(1);
  TS_RETURN_IF_ERROR(Want("GroupRmsScale", "g", g, {R, W}));
  TS_RETURN_IF_ERROR(Want("GroupRmsScale", "ss", ss, {R, W / group}));
  TS_RETURN_IF_ERROR(Want("GroupRmsScale", "w", w, {W}));
  TS_RETURN_IF_ERROR(Want("GroupRmsScale", "out", *out, {R, W}));
  GroupRmsScale(g.data<float>(), ss.data<float>(), w.data<float>(), static_cast<int>(R),
                static_cast<int>(W), static_cast<int>(group), static_cast<int>(count), eps,
                out->data<float>());
  return absl::OkStatus();
}

}  // namespace treespec::cpu
