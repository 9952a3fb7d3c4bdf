// The CPU backend's Mamba-2 tree ops (Backend::SsmTreeConv, SsmTreeScan,
// GateSumSquares, GroupRmsScale): shape checks, then the plain loops of
// kernels/cpu/ssm_tree_ops.h. INVALID_ARGUMENT naming the tensor for a shape,
// dtype or batch that does not fit. Called by the CPU backend, whose
// thread-compatibility they share.
#pragma once

#include "absl/status/status.h"
#include "core/tensor/backend.h"

namespace treespec::cpu {

absl::Status CheckedSsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                const SsmTreeBatch& batch, Tensor* states, Tensor* out);
absl::Status CheckedSsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                                const Tensor& dt_bias, const Tensor& D,
                                const SsmScanParams& params, const SsmTreeBatch& batch,
                                Tensor* states, Tensor* y, int threads);
absl::Status CheckedGateSumSquares(const Tensor& y, const Tensor& z, int64_t group, Tensor* g,
                                   Tensor* ss);
absl::Status CheckedGroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w,
                                  int64_t count, float eps, Tensor* out);

}  // namespace treespec::cpu
