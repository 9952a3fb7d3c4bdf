// CudaBackend Mamba ops: the causal depthwise convolution and the selective
// scan, for one sequence and for a batch of state slots (the Mamba-2 tree
// ops are in cuda_backend_ssm_tree.cc).
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/mamba_conv.h"
#include "kernels/cuda/mamba_scan.h"

namespace treespec::cuda {

absl::Status CudaBackend::MambaConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                    Tensor* state, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&x, &w, &b, state, out}, "mamba conv"));
  const int64_t L = x.dim(0), C = x.dim(1), K = w.dim(1);
  if (x.rank() != 2 || w.numel() != C * K || b.numel() != C || state->numel() != C * K ||
      out->numel() != L * C) {
    return ShapeError("MambaConv", {&x, &w, &b, state, out});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchMambaConv(dtype_, x.raw(), L, C, w.raw(), b.raw(),
                                          static_cast<int>(K), state->raw(), out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::MambaConvBatch(const Tensor& x, const Tensor& w, const Tensor& b,
                                         const Tensor& slots, Tensor* states, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&x, &w, &b, states, out}, "mamba conv batch"));
  TS_RETURN_IF_ERROR(Check(slots, DType::kI32, "slots"));
  const int64_t B = x.dim(0), C = x.dim(1), K = w.dim(1);
  if (x.rank() != 2 || w.numel() != C * K || b.numel() != C || slots.numel() != B ||
      RowSize(*states) != C * K || out->numel() != B * C) {
    return ShapeError("MambaConvBatch", {&x, &w, &b, &slots, states, out});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchMambaConvBatch(dtype_, x.raw(), B, C, w.raw(), b.raw(),
                                               static_cast<int>(K), slots.data<int32_t>(),
                                               states->raw(), out->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::MambaScan(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                                    const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                                    const Tensor& D, const Tensor& z, Tensor* state, Tensor* y) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&u, &delta, &Bm, &Cm, &z, y}, "mamba scan"));
  TS_RETURN_IF_ERROR(CheckAllF32({&dt_bias, &A, &D, state}, "mamba scan"));
  const int64_t L = u.dim(0), C = u.dim(1), N = A.dim(1);
  if (u.rank() != 2 || A.rank() != 2 || delta.numel() != L * C || z.numel() != L * C ||
      dt_bias.numel() != C || A.dim(0) != C || Bm.numel() != L * N || Cm.numel() != L * N ||
      D.numel() != C || state->numel() != C * N || y->numel() != L * C) {
    return ShapeError("MambaScan", {&u, &A, &Bm, state, y});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchMambaScan(dtype_, u.raw(), delta.raw(), dt_bias.data<float>(),
                                          A.data<float>(), Bm.raw(), Cm.raw(), D.data<float>(),
                                          z.raw(), L, C, static_cast<int>(N), state->data<float>(),
                                          y->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::MambaScanBatch(const Tensor& u, const Tensor& delta,
                                         const Tensor& dt_bias, const Tensor& A, const Tensor& Bm,
                                         const Tensor& Cm, const Tensor& D, const Tensor& z,
                                         const Tensor& slots, Tensor* states, Tensor* y) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_RETURN_IF_ERROR(CheckAll({&u, &delta, &Bm, &Cm, &z, y}, "mamba scan batch"));
  TS_RETURN_IF_ERROR(CheckAllF32({&dt_bias, &A, &D, states}, "mamba scan batch"));
  TS_RETURN_IF_ERROR(Check(slots, DType::kI32, "slots"));
  const int64_t B = u.dim(0), C = u.dim(1), N = A.dim(1);
  if (u.rank() != 2 || A.rank() != 2 || delta.numel() != B * C || z.numel() != B * C ||
      dt_bias.numel() != C || A.dim(0) != C || Bm.numel() != B * N || Cm.numel() != B * N ||
      D.numel() != C || slots.numel() != B || RowSize(*states) != C * N || y->numel() != B * C) {
    return ShapeError("MambaScanBatch", {&u, &A, &Bm, &slots, states, y});
  }
  TS_CUDA_RETURN_IF_ERROR(
      LaunchMambaScanBatch(dtype_, u.raw(), delta.raw(), dt_bias.data<float>(), A.data<float>(),
                           Bm.raw(), Cm.raw(), D.data<float>(), z.raw(), B, C, static_cast<int>(N),
                           slots.data<int32_t>(), states->data<float>(), y->raw(), stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
