#include "kernels/cuda/attention_plan.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec::cuda {

absl::StatusOr<std::unique_ptr<CudaAttentionPlan>> CudaAttentionPlan::Create(
    const AttentionBatch& batch, Backend* backend) {
  const int S = batch.num_seqs;
  const int maxb = batch.max_blocks_per_seq;
  const int bs = batch.block_size;
  if (S < 0 || bs <= 0 || static_cast<int>(batch.query_start.size()) != S + 1 ||
      static_cast<int>(batch.context_lens.size()) != S ||
      static_cast<int>(batch.prior_lens.size()) != S ||
      static_cast<int>(batch.mask_offset.size()) != S ||
      static_cast<int64_t>(batch.block_tables.size()) != static_cast<int64_t>(S) * maxb) {
    return absl::InvalidArgumentError("cuda backend: malformed AttentionBatch");
  }
  auto plan = std::unique_ptr<CudaAttentionPlan>(new CudaAttentionPlan(batch));
  const int T = batch.num_tokens();
  std::vector<int32_t> token_slots(T);
  for (int s = 0; s < S; ++s) {
    const int n = batch.num_new(s), ctx = batch.context_lens[s], tail = batch.tail_len(s);
    if (n < 0 || ctx < 0 || batch.prior_lens[s] < 0) {
      return absl::InvalidArgumentError("AttentionBatch: negative length");
    }
    // The CUDA kernel has no sliding window; a window that masks nothing (every
    // key within it of every query) gives the same result as none.
    if (batch.sliding_window > 0 && ctx + tail > batch.sliding_window) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda backend: sliding_window attention is not implemented (sequence ", s, " spans ",
          ctx + tail, " positions, window ", batch.sliding_window, "); use the cpu backend"));
    }
    const int64_t need = (static_cast<int64_t>(ctx) + tail + bs - 1) / bs;
    if (need > maxb) {
      return absl::InvalidArgumentError(absl::StrCat("AttentionBatch: sequence ", s, " needs ",
                                                     need, " blocks, table has ", maxb));
    }
    for (int64_t b = 0; b < need; ++b) {
      const int32_t block = batch.block_tables[s * static_cast<int64_t>(maxb) + b];
      if (block < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("AttentionBatch: sequence ", s, " block ", b, " is unassigned"));
      }
      plan->max_slot = std::max<int64_t>(plan->max_slot, static_cast<int64_t>(block) * bs + bs - 1);
    }
    if (batch.mask_offset[s] >= 0 &&
        batch.mask_offset[s] + static_cast<int64_t>(n) * ((tail + 63) / 64) >
            static_cast<int64_t>(batch.mask_words.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("AttentionBatch: sequence ", s, " mask runs past mask_words"));
    }
    for (int i = 0; i < n; ++i) {
      token_slots[batch.query_start[s] + i] = batch.Slot(s, batch.Position(s, i));
    }
  }
  std::vector<int32_t> packed(batch.mask_words.size() * 2);
  std::memcpy(packed.data(), batch.mask_words.data(), batch.mask_words.size() * sizeof(uint64_t));
  auto append = [&](const std::vector<int32_t>& v) {
    const size_t at = packed.size();
    packed.insert(packed.end(), v.begin(), v.end());
    return at;
  };
  const size_t qs = append(batch.query_start), cl = append(batch.context_lens);
  const size_t pl = append(batch.prior_lens), bt = append(batch.block_tables);
  const size_t mo = append(batch.mask_offset), ts = append(token_slots);
  TS_ASSIGN_OR_RETURN(plan->meta_,
                      backend->Alloc(DType::kI32, {static_cast<int64_t>(packed.size())}));
  TS_RETURN_IF_ERROR(backend->Upload(packed.data(), DType::kI32, &plan->meta_));
  const int32_t* base = plan->meta_.data<int32_t>();
  plan->mask_words = reinterpret_cast<const uint64_t*>(base);
  plan->query_start = base + qs;
  plan->context_lens = base + cl;
  plan->prior_lens = base + pl;
  plan->block_tables = base + bt;
  plan->mask_offset = base + mo;
  plan->token_slots = base + ts;
  return plan;
}

absl::StatusOr<const CudaAttentionPlan::Work*> CudaAttentionPlan::WorkFor(int group,
                                                                         int num_kv_heads,
                                                                         int num_sms,
                                                                         Backend* backend) const {
  if (work_.group == group && work_.num_kv_heads == num_kv_heads) return &work_;
  Work w;
  w.work = PlanAttentionWork(batch(), group, num_kv_heads, num_sms);
  const size_t item_bytes = w.work.items.size() * sizeof(AttentionItem);
  const size_t group_bytes = w.work.groups.size() * sizeof(AttentionGroup);
  std::vector<char> bytes(item_bytes + group_bytes);
  std::memcpy(bytes.data(), w.work.items.data(), item_bytes);
  std::memcpy(bytes.data() + item_bytes, w.work.groups.data(), group_bytes);
  TS_ASSIGN_OR_RETURN(w.device, backend->Alloc(DType::kU8, {static_cast<int64_t>(bytes.size())}));
  TS_RETURN_IF_ERROR(backend->Upload(bytes.data(), DType::kU8, &w.device));
  w.items = reinterpret_cast<const AttentionItem*>(w.device.raw());
  w.groups = reinterpret_cast<const AttentionGroup*>(static_cast<const char*>(w.device.raw()) +
                                                     item_bytes);
  w.group = group;
  w.num_kv_heads = num_kv_heads;
  work_ = std::move(w);
  return &work_;
}

}  // namespace treespec::cuda
