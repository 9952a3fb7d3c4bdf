// CudaBackend attention: the per-pass plan, fused QKV split + RoPE + KV
// write, and paged tree attention.
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/qkv_rope.h"

namespace treespec::cuda {

absl::StatusOr<std::unique_ptr<AttentionPlan>> CudaBackend::PlanAttention(
    const AttentionBatch& batch) {
  TS_RETURN_IF_ERROR(Enter("PlanAttention"));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<CudaAttentionPlan> plan,
                      CudaAttentionPlan::Create(batch, this));
  return std::unique_ptr<AttentionPlan>(std::move(plan));
}

absl::Status CudaBackend::QkvRope(const Tensor& qkv, const Tensor& positions,
                                  const Tensor& inv_freq, const AttentionPlan& plan_base, Tensor* q,
                                  Tensor* k_cache, Tensor* v_cache) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_ASSIGN_OR_RETURN(const CudaAttentionPlan* plan, Plan(plan_base));
  TS_RETURN_IF_ERROR(Check(qkv, dtype_, "qkv"));
  TS_RETURN_IF_ERROR(Check(positions, DType::kI32, "positions"));
  TS_RETURN_IF_ERROR(Check(inv_freq, DType::kF32, "inv_freq"));
  TS_RETURN_IF_ERROR(Check(*q, dtype_, "q"));
  TS_RETURN_IF_ERROR(Check(*k_cache, dtype_, "k_cache"));
  TS_RETURN_IF_ERROR(Check(*v_cache, dtype_, "v_cache"));
  const int64_t T = plan->batch().num_tokens();
  // inv_freq [Rd / 2]: the first Rd <= Dh columns of each head rotate.
  if (q->rank() != 3 || k_cache->rank() != 3 || v_cache->shape() != k_cache->shape() ||
      q->dim(0) != T || q->dim(2) != k_cache->dim(2) || inv_freq.rank() != 1 ||
      2 * inv_freq.numel() > q->dim(2) ||
      qkv.numel() != T * (q->dim(1) + 2 * k_cache->dim(1)) * q->dim(2) || positions.numel() != T ||
      plan->max_slot >= k_cache->dim(0)) {
    return ShapeError("QkvRope", {&qkv, &positions, &inv_freq, q, k_cache});
  }
  TS_CUDA_RETURN_IF_ERROR(LaunchQkvRope(
      dtype_, qkv.raw(), positions.data<int32_t>(), inv_freq.data<float>(),
      static_cast<int>(inv_freq.numel()), plan->token_slots, T,
      static_cast<int>(q->dim(1)), static_cast<int>(k_cache->dim(1)), static_cast<int>(q->dim(2)),
      q->raw(), k_cache->raw(), v_cache->raw(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                    const AttentionPlan& plan_base, float scale, Tensor* out) {
  TS_RETURN_IF_ERROR(Enter(nullptr));
  TS_ASSIGN_OR_RETURN(const CudaAttentionPlan* plan, Plan(plan_base));
  TS_RETURN_IF_ERROR(Check(q, dtype_, "q"));
  TS_RETURN_IF_ERROR(Check(k_cache, dtype_, "k_cache"));
  TS_RETURN_IF_ERROR(Check(v_cache, dtype_, "v_cache"));
  TS_RETURN_IF_ERROR(Check(*out, dtype_, "attention out"));
  const AttentionBatch& batch = plan->batch();
  if (q.rank() != 3 || k_cache.rank() != 3 || v_cache.shape() != k_cache.shape() ||
      q.dim(0) != batch.num_tokens() || q.dim(2) != k_cache.dim(2) ||
      q.dim(1) % k_cache.dim(1) != 0 || out->numel() != q.numel() ||
      plan->max_slot >= k_cache.dim(0)) {
    return ShapeError("Attention", {&q, &k_cache, out});
  }
  const int H = static_cast<int>(q.dim(1)), Hkv = static_cast<int>(k_cache.dim(1));
  const int Dh = static_cast<int>(q.dim(2));
  TS_ASSIGN_OR_RETURN(const CudaAttentionPlan::Work* work,
                      plan->WorkFor(H / Hkv, Hkv, num_sms_, this));
  const AttentionWork& w = work->work;
  Tensor partials;
  const size_t partial_floats = AttentionPartialFloats(w, Hkv, Dh);
  if (partial_floats > 0) {
    TS_ASSIGN_OR_RETURN(partials, Scratch(DType::kF32, {static_cast<int64_t>(partial_floats)}));
  }
  AttentionArgs a;
  a.dtype = dtype_;
  a.q = q.raw();
  a.k_cache = k_cache.raw();
  a.v_cache = v_cache.raw();
  a.out = out->raw();
  a.query_start = plan->query_start;
  a.context_lens = plan->context_lens;
  a.prior_lens = plan->prior_lens;
  a.block_tables = plan->block_tables;
  a.mask_offset = plan->mask_offset;
  a.mask_words = plan->mask_words;
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.block_size = batch.block_size;
  a.H = H;
  a.Hkv = Hkv;
  a.Dh = Dh;
  a.scale = scale;
  a.items = work->items;
  a.num_items = static_cast<int>(w.items.size());
  a.groups = work->groups;
  a.num_groups = static_cast<int>(w.groups.size());
  a.rows_per_block = w.rows_per_block;
  a.partials = partials.defined() ? partials.data<float>() : nullptr;
  a.max_smem_bytes = max_smem_optin_;
  const cudaError_t err = LaunchAttention(a, stream_);
  if (err == cudaErrorInvalidValue) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda attention: head_dim ", Dh, " must be a multiple of 8 (4 for f32) and <= 256"));
  }
  TS_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace treespec::cuda
