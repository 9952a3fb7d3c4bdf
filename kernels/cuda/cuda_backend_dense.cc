// CudaBackend dense ops: embedding, RMSNorm, cuBLAS matrix products,
// elementwise ops and row gathers / copies.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/add.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/row_copy.h"
#include "kernels/cuda/silu_mul.h"
#include "kernels/cuda/slice_cols.h"

namespace treespec::cuda {

absl::Status CudaBackend::Embedding(const Tensor& ids, const Tensor& table, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(ids, DType::kI32, "embedding ids"));
  TS_RETURN_IF_ERROR(Check(table, dtype_, "embedding table"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "embedding out"));
  if (table.rank() != 2 || out->numel() != ids.numel() * table.dim(1)) {
    return ShapeError("Embedding", {&ids, &table, out});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchEmbedding(ids.data<int32_t>(), ids.numel(), table.raw(),
                                          table.dim(1) * DTypeSize(dtype_), out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(x, dtype_, "rmsnorm x"));
  TS_RETURN_IF_ERROR(Check(w, dtype_, "rmsnorm w"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "rmsnorm out"));
  const int64_t D = w.numel();
  if (D == 0 || x.numel() % D != 0 || out->numel() != x.numel()) {
    return ShapeError("RmsNorm", {&x, &w, out});
  }
  TS_CUDA_RETURN_IF_ERROR(
      LaunchRmsNorm(dtype_, x.raw(), w.raw(), x.numel() / D, D, eps, out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Linear(const Tensor& x, const Tensor& w, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(x, dtype_, "linear x"));
  TS_RETURN_IF_ERROR(Check(w, dtype_, "linear w"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "linear out"));
  if (w.rank() != 2 || x.rank() < 1 || RowSize(x) != w.dim(1) || out->rank() < 1 ||
      RowSize(*out) != w.dim(0) || out->dim(0) != x.dim(0)) {
    return ShapeError("Linear", {&x, &w, out});
  }
  const int64_t T = x.dim(0), K = w.dim(1), N = w.dim(0);
  if (T <= skinny_max_rows_ && SkinnyLinearFits(dtype_, x.raw(), w.raw(), T, K)) {
    TS_CUDA_RETURN_IF_ERROR(
        LaunchSkinnyLinear(dtype_, x.raw(), w.raw(), T, K, N, out->raw(), stream_));
    return absl::OkStatus();
  }
  return cuda::Linear(cublas_, dtype_, x.raw(), w.raw(), T, K, N, out->raw());
}

absl::Status CudaBackend::Add(const Tensor& a, const Tensor& b, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(a, dtype_, "add a"));
  TS_RETURN_IF_ERROR(Check(b, dtype_, "add b"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "add out"));
  if (a.numel() != b.numel() || a.numel() != out->numel()) return ShapeError("Add", {&a, &b, out});
  TS_CUDA_RETURN_IF_ERROR(LaunchAdd(dtype_, a.raw(), b.raw(), a.numel(), out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::AddRmsNorm(Tensor* x, const Tensor& r, const Tensor& w, float eps,
                                      Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(*x, dtype_, "add_rmsnorm x"));
  TS_RETURN_IF_ERROR(Check(r, dtype_, "add_rmsnorm r"));
  TS_RETURN_IF_ERROR(Check(w, dtype_, "add_rmsnorm w"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "add_rmsnorm out"));
  const int64_t D = w.numel();
  if (D == 0 || x->numel() % D != 0 || r.numel() != x->numel() || out->numel() != x->numel() ||
      out->raw() == x->raw()) {
    return ShapeError("AddRmsNorm", {x, &r, &w, out});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchAddRmsNorm(dtype_, x->raw(), r.raw(), w.raw(), x->numel() / D, D,
                                           eps, out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::AddBias(Tensor* x, const Tensor& bias) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(*x, dtype_, "add_bias x"));
  TS_RETURN_IF_ERROR(Check(bias, dtype_, "add_bias bias"));
  if (x->rank() < 1 || RowSize(*x) != bias.numel()) return ShapeError("AddBias", {x, &bias});
  TS_CUDA_RETURN_IF_ERROR(
      LaunchAddBias(dtype_, x->raw(), bias.raw(), x->dim(0), bias.numel(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::HeadRmsNorm(Tensor* x, const Tensor& w, int64_t head_begin,
                                      int64_t num_heads, float eps) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(*x, dtype_, "head_rmsnorm x"));
  TS_RETURN_IF_ERROR(Check(w, dtype_, "head_rmsnorm w"));
  const int64_t Dh = w.numel();
  if (x->rank() < 1 || Dh == 0 || RowSize(*x) % Dh != 0 || head_begin < 0 || num_heads < 0 ||
      (head_begin + num_heads) * Dh > RowSize(*x)) {
    return ShapeError("HeadRmsNorm", {x, &w});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchHeadRmsNorm(dtype_, x->raw(), w.raw(), x->dim(0), RowSize(*x),
                                            Dh, head_begin, num_heads, eps, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SiluMul(const Tensor& gu, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(Check(gu, dtype_, "silu_mul gu"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "silu_mul out"));
  if (gu.rank() != 2 || gu.dim(1) % 2 != 0 || out->numel() != gu.numel() / 2) {
    return ShapeError("SiluMul", {&gu, out});
  }
  TS_CUDA_RETURN_IF_ERROR(
      LaunchSiluMul(dtype_, gu.raw(), gu.dim(0), gu.dim(1) / 2, out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SliceCols(const Tensor& x, int64_t begin, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  if (x.device() != DeviceKind::kCuda || out->device() != DeviceKind::kCuda ||
      x.dtype() != out->dtype() || x.rank() != 2 || out->rank() != 2 || out->dim(0) != x.dim(0) ||
      begin < 0 || begin + out->dim(1) > x.dim(1)) {
    return ShapeError("SliceCols", {&x, out});
  }
  const int64_t size = DTypeSize(x.dtype());
  TS_CUDA_RETURN_IF_ERROR(LaunchSliceCols(x.raw(), x.dim(0), x.dim(1) * size, begin * size,
                                          out->raw(), out->dim(1) * size, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::GatherRows(const Tensor& x, const std::vector<int32_t>& rows,
                                     Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  if (x.device() != DeviceKind::kCuda || out->device() != DeviceKind::kCuda ||
      x.dtype() != out->dtype() || x.rank() < 1 || out->rank() < 1 ||
      out->dim(0) != static_cast<int64_t>(rows.size()) || RowSize(*out) != RowSize(x)) {
    return ShapeError("GatherRows", {&x, out});
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= x.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GatherRows: row ", r, " outside [0, ", x.dim(0), ")"));
    }
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchRowCopy(x.raw(), rows, out->raw(), {},
                                        static_cast<int64_t>(rows.size()),
                                        RowSize(x) * DTypeSize(x.dtype()), stream_));
  return absl::OkStatus();
}

// Sequential semantics (copy i sees the writes of copies < i) reduced to
// one parallel step: `holds` tracks which original row each written row
// ends up holding, so the final state is "row d := original row holds[d]".
// If some row is both a source and a destination of that step, sources are
// first gathered into scratch (KV compaction never needs this: its
// destinations all precede its sources; see PagedKvCache::CommitPath).
absl::Status CudaBackend::CopyRows(Tensor* pool, const std::vector<int32_t>& src,
                                   const std::vector<int32_t>& dst) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  if (pool->device() != DeviceKind::kCuda || pool->rank() < 1 || src.size() != dst.size()) {
    return ShapeError("CopyRows", {pool});
  }
  std::unordered_map<int32_t, int32_t> holds;
  std::vector<int32_t> order;
  for (size_t i = 0; i < src.size(); ++i) {
    for (int32_t r : {src[i], dst[i]}) {
      if (r < 0 || r >= pool->dim(0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("CopyRows: row ", r, " outside [0, ", pool->dim(0), ")"));
      }
    }
    auto it = holds.find(src[i]);
    const int32_t orig = it == holds.end() ? src[i] : it->second;
    if (holds.find(dst[i]) == holds.end()) order.push_back(dst[i]);
    holds[dst[i]] = orig;
  }
  std::vector<int32_t> from, to;
  for (int32_t d : order) {
    if (holds[d] == d) continue;
    from.push_back(holds[d]);
    to.push_back(d);
  }
  if (from.empty()) return absl::OkStatus();
  const std::unordered_set<int32_t> written(to.begin(), to.end());
  const bool overlap =
      std::any_of(from.begin(), from.end(), [&](int32_t r) { return written.count(r) > 0; });
  const int64_t n = static_cast<int64_t>(from.size());
  const int64_t row_bytes = RowSize(*pool) * DTypeSize(pool->dtype());
  if (!overlap) {
    TS_CUDA_RETURN_IF_ERROR(
        LaunchRowCopy(pool->raw(), from, pool->raw(), to, n, row_bytes, stream_));
    return absl::OkStatus();
  }
  TS_ASSIGN_OR_RETURN(Tensor scratch, Scratch(DType::kU8, {n * row_bytes}));
  TS_CUDA_RETURN_IF_ERROR(
      LaunchRowCopy(pool->raw(), from, scratch.raw(), {}, n, row_bytes, stream_));
  TS_CUDA_RETURN_IF_ERROR(LaunchRowCopy(scratch.raw(), {}, pool->raw(), to, n, row_bytes, stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
