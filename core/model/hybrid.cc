// HybridModel's forward pass: the host batch, the layers (Mamba-2 mixer,
// attention, MLP), activation replay and the LM head.
#include "core/model/hybrid.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/spec/sampling.h"
#include "core/spec/tree_packing.h"
#include "core/util/status_macros.h"

namespace treespec {

struct HybridModel::HostBatch {
  AttentionBatch attn;  // with attention layers only
  std::vector<int32_t> tokens, positions, logit_rows, hidden_rows;
};

struct HybridModel::Activations {
  Tensor x, h, proj, z, rin, y, qkv, q, att, gu, act, pos;
  std::unique_ptr<AttentionPlan> plan;
};

absl::Status HybridModel::DescribeBatch(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                                        HostBatch* hb, ForwardOutput* out) const {
  std::vector<int64_t> kv_ids;
  std::vector<int> num_new, num_prior;
  for (const ForwardSeq& s : seqs) {
    if (s.num_prior < 0) return absl::InvalidArgumentError("forward: negative num_prior");
    kv_ids.push_back(s.kv_seq);
    num_new.push_back(static_cast<int>(s.tokens.size()));
    num_prior.push_back(s.num_prior);
  }
  if (cache != nullptr) {
    TS_ASSIGN_OR_RETURN(hb->attn, cache->BuildBatch(kv_ids, num_new, num_prior));
  }
  out->row_start.assign(1, 0);
  out->hidden_row_start.assign(1, 0);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& s = seqs[si];
    const int n = static_cast<int>(s.tokens.size());
    const int32_t t0 = static_cast<int32_t>(hb->tokens.size());
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is outside the vocabulary [0, ",
                                                       config_.vocab_size, ")"));
      }
    }
    hb->tokens.insert(hb->tokens.end(), s.tokens.begin(), s.tokens.end());
    const int32_t base = cache != nullptr ? hb->attn.context_lens[si] : 0;
    if (s.parents.empty()) {
      for (int i = 0; i < n; ++i) hb->positions.push_back(base + s.num_prior + i);
    } else {
      if (static_cast<int>(s.parents.size()) != s.num_prior + n) {
        return absl::InvalidArgumentError(absl::StrCat("tree: ", s.parents.size(), " parents for ",
                                                       s.num_prior, " prior + ", n, " new nodes"));
      }
      PackedTree packed;
      TS_RETURN_IF_ERROR(PackTree(s.parents, &packed));
      for (int i = s.num_prior; i < s.num_prior + n; ++i) hb->positions.push_back(base + packed.depth[i]);
      if (cache != nullptr) {
        hb->attn.mask_offset[si] = static_cast<int32_t>(hb->attn.mask_words.size());
        hb->attn.mask_words.insert(hb->attn.mask_words.end(),
                                   packed.masks.begin() + s.num_prior * packed.words_per_row,
                                   packed.masks.end());
      }
    }
    const size_t first_logit = hb->logit_rows.size();
    if (s.logits == LogitsMode::kLast && n > 0) hb->logit_rows.push_back(t0 + n - 1);
    if (s.logits == LogitsMode::kAll) {
      for (int i = 0; i < n; ++i) hb->logit_rows.push_back(t0 + i);
    }
    if (s.hidden_all) {
      for (int i = 0; i < n; ++i) hb->hidden_rows.push_back(t0 + i);
    } else {
      hb->hidden_rows.insert(hb->hidden_rows.end(), hb->logit_rows.begin() + first_logit,
                             hb->logit_rows.end());
    }
    out->row_start.push_back(static_cast<int32_t>(hb->logit_rows.size()));
    out->hidden_row_start.push_back(static_cast<int32_t>(hb->hidden_rows.size()));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::ConvScan(const Mixer& m, int64_t index, const SsmTreeBatch& batch,
                                   const Tensor& rin, Mamba2StatePool* pool, Tensor* y) {
  Backend* be = backend_;
  const int64_t R = rin.dim(0);
  TS_ASSIGN_OR_RETURN(Tensor raw, workspace_.Get(20, {R, conv_dim_}));
  TS_ASSIGN_OR_RETURN(Tensor dt, workspace_.Get(21, {R, ssm_heads_}));
  TS_ASSIGN_OR_RETURN(Tensor xbc, workspace_.Get(22, {R, conv_dim_}));
  TS_RETURN_IF_ERROR(be->SliceCols(rin, 0, &raw));
  TS_RETURN_IF_ERROR(be->SliceCols(rin, conv_dim_, &dt));
  TS_RETURN_IF_ERROR(be->SsmTreeConv(raw, m.conv_w, m.conv_b, batch, pool->conv(index), &xbc));
  SsmScanParams params;
  params.n_groups = ssm_groups_;
  return be->SsmTreeScan(xbc, dt, m.A, m.dt_bias, m.D, params, batch, pool->ssm(index), y);
}

absl::Status HybridModel::RunMixer(const Layer& w, const SsmPass& pass, Mamba2StatePool* pool,
                                   Activations* a) {
  Backend* be = backend_;
  const Mixer& m = w.mixer;
  const int64_t T = a->x.dim(0), Pn = static_cast<int64_t>(pass.prior_rows.size()), R = Pn + T;
  Tensor* cache = pool->cache(w.index);
  TS_RETURN_IF_ERROR(be->RmsNorm(a->x, w.ln1, static_cast<float>(config_.norm_eps), &a->h));
  TS_RETURN_IF_ERROR(be->Linear(a->h, m.in_proj, &a->proj));
  if (config_.proj_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->proj, m.in_bias));
  TS_RETURN_IF_ERROR(be->SliceCols(a->proj, 0, &a->z));
  // rin: the conv inputs and dt of the batch's rows, prior ones from the cache.
  Tensor rin = a->rin;
  Tensor fresh = rin.Rows(Pn, R);
  TS_RETURN_IF_ERROR(be->SliceCols(a->proj, ssm_inner_, &fresh));
  if (Pn > 0) {
    Tensor old = rin.Rows(0, Pn);
    TS_RETURN_IF_ERROR(be->GatherRows(*cache, pass.prior_rows, &old));
  }
  for (const SsmPass::Keep& k : pass.keep) {
    std::vector<int32_t> rows(k.n);
    for (int32_t i = 0; i < k.n; ++i) rows[i] = static_cast<int32_t>(Pn) + k.first + i;
    Tensor dst = cache->Rows(k.cache_row, k.cache_row + k.n);
    TS_RETURN_IF_ERROR(be->GatherRows(rin, rows, &dst));
  }
  Tensor y_all = a->y;
  TS_RETURN_IF_ERROR(ConvScan(m, w.index, pass.batch, rin, pool, &y_all));
  // Gated RMSNorm of the new rows; a group split over ranks sums over them.
  Tensor y = y_all.Rows(Pn, R);
  const int64_t count = config_.ssm_inner() / config_.ssm_groups;
  const int64_t local_group = groups_split_ ? count : ssm_inner_;
  TS_ASSIGN_OR_RETURN(Tensor ss, be->Alloc(DType::kF32, {T, ssm_inner_ / local_group}));
  TS_RETURN_IF_ERROR(be->GateSumSquares(y, a->z, local_group, &y, &ss));
  if (!groups_split_ && tp_ > 1) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&ss));
  TS_RETURN_IF_ERROR(
      be->GroupRmsScale(y, ss, m.norm, count, static_cast<float>(config_.norm_eps), &y));
  TS_RETURN_IF_ERROR(be->Linear(y, m.out_proj, &a->h));
  if (tp_ > 1) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&a->h));
  if (config_.proj_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->h, m.out_bias));
  return be->Add(a->x, a->h, &a->x);
}

absl::Status HybridModel::RunAttention(const Layer& w, const HostBatch& hb, PagedKvCache* cache,
                                       Activations* a) {
  Backend* be = backend_;
  const LlamaConfig& c = config_.attn;
  const int64_t T = a->x.dim(0), l = w.index;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TS_RETURN_IF_ERROR(be->RmsNorm(a->x, w.ln1, static_cast<float>(config_.norm_eps), &a->h));
  TS_RETURN_IF_ERROR(be->LinearRowBlocks(a->h, w.attn.w_qkv, &a->qkv));
  if (c.qkv_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->qkv, w.attn.b_qkv));
  TS_RETURN_IF_ERROR(be->QkvRope(a->qkv, a->pos, inv_freq_, *a->plan, &a->q, cache->k(l), cache->v(l)));
  TS_RETURN_IF_ERROR(be->Attention(a->q, *cache->k(l), *cache->v(l), *a->plan, scale, &a->att));
  TS_RETURN_IF_ERROR(be->Linear(a->att.Reshape({T, heads_ * c.head_dim}), w.attn.w_o, &a->h));
  if (tp_ > 1) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&a->h));
  if (c.o_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->h, w.attn.b_o));
  return be->Add(a->x, a->h, &a->x);
}

absl::Status HybridModel::RunMlp(const Layer& w, Activations* a) {
  Backend* be = backend_;
  const bool bias = config_.attn.mlp_bias;
  TS_RETURN_IF_ERROR(be->RmsNorm(a->x, w.ln2, static_cast<float>(config_.norm_eps), &a->h));
  TS_RETURN_IF_ERROR(be->LinearRowBlocks(a->h, w.w_gate_up, &a->gu));
  if (bias) TS_RETURN_IF_ERROR(be->AddBias(&a->gu, w.b_gate_up));
  TS_RETURN_IF_ERROR(be->SiluMul(a->gu, &a->act));
  TS_RETURN_IF_ERROR(be->Linear(a->act, w.w_down, &a->h));
  if (tp_ > 1) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&a->h));
  if (bias) TS_RETURN_IF_ERROR(be->AddBias(&a->h, w.b_down));
  return be->Add(a->x, a->h, &a->x);
}

absl::Status HybridModel::Forward(const std::vector<ForwardSeq>& seqs, const SsmPass& pass,
                                  PagedKvCache* cache, Mamba2StatePool* pool, ForwardOutput* out,
                                  const ForwardOptions& options) {
  const std::vector<int32_t>& hidden_layers = options.hidden_layers;
  for (size_t k = 0; k < hidden_layers.size(); ++k) {
    if (hidden_layers[k] < 0 || hidden_layers[k] >= config_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("hidden_layers[", k, "] = ", hidden_layers[k],
                                                     " is not a layer in [0, ", config_.num_layers,
                                                     ")"));
    }
  }
  if (options.input_rows != nullptr) {
    return absl::UnimplementedError("hybrid: input_rows (an EAGLE head's inputs) are Llama-only");
  }
  if ((cache == nullptr) != (num_attention_layers() == 0)) {
    return absl::InvalidArgumentError("hybrid: a KV cache is needed exactly with attention layers");
  }
  HostBatch hb;
  TS_RETURN_IF_ERROR(DescribeBatch(seqs, cache, &hb, out));
  const int64_t T = static_cast<int64_t>(hb.tokens.size()), D = config_.hidden_size;
  if (pass.batch.num_rows() != static_cast<int32_t>(pass.prior_rows.size() + T)) {
    return absl::InvalidArgumentError(absl::StrCat("hybrid: the SSM batch has ", pass.batch.num_rows(),
                                                   " rows for ", T, " tokens and ",
                                                   pass.prior_rows.size(), " prior rows"));
  }
  out->vocab_size = config_.vocab_size;
  out->hidden_size = D;
  out->hidden.assign(hidden_layers.size() * hb.hidden_rows.size() * D, 0.0f);
  out->argmax.clear();
  out->logits.clear();
  if (T == 0) return absl::OkStatus();
  Backend* be = backend_;
  const int64_t R = pass.batch.num_rows();
  Activations a;
  TS_ASSIGN_OR_RETURN(Tensor ids, be->Alloc(DType::kI32, {T}));
  TS_RETURN_IF_ERROR(be->Upload(hb.tokens.data(), DType::kI32, &ids));
  if (cache != nullptr) {
    TS_ASSIGN_OR_RETURN(a.pos, be->Alloc(DType::kI32, {T}));
    TS_RETURN_IF_ERROR(be->Upload(hb.positions.data(), DType::kI32, &a.pos));
    TS_ASSIGN_OR_RETURN(a.plan, be->PlanAttention(hb.attn));
  }
  const int64_t Dh = config_.attn.head_dim;
  TS_ASSIGN_OR_RETURN(a.x, workspace_.Get(0, {T, D}));
  TS_ASSIGN_OR_RETURN(a.h, workspace_.Get(1, {T, D}));
  TS_ASSIGN_OR_RETURN(a.proj, workspace_.Get(2, {T, ssm_inner_ + conv_dim_ + ssm_heads_}));
  TS_ASSIGN_OR_RETURN(a.z, workspace_.Get(3, {T, ssm_inner_}));
  TS_ASSIGN_OR_RETURN(a.rin, workspace_.Get(4, {R, conv_dim_ + ssm_heads_}));
  TS_ASSIGN_OR_RETURN(a.y, workspace_.Get(5, {R, ssm_inner_}));
  TS_ASSIGN_OR_RETURN(a.qkv, workspace_.Get(6, {T, (heads_ + 2 * kv_heads_) * Dh}));
  TS_ASSIGN_OR_RETURN(a.q, workspace_.Get(7, {T, heads_, Dh}));
  TS_ASSIGN_OR_RETURN(a.att, workspace_.Get(8, {T, heads_, Dh}));
  TS_ASSIGN_OR_RETURN(a.gu, workspace_.Get(9, {T, 2 * ffn_}));
  TS_ASSIGN_OR_RETURN(a.act, workspace_.Get(10, {T, ffn_}));
  TS_RETURN_IF_ERROR(be->Embedding(ids, embed_, &a.x));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    TS_RETURN_IF_ERROR(w.is_attention ? RunAttention(w, hb, cache, &a)
                                      : RunMixer(w, pass, pool, &a));
    if (config_.has_mlp) TS_RETURN_IF_ERROR(RunMlp(w, &a));
    TS_RETURN_IF_ERROR(CopyHidden(static_cast<int32_t>(l), hidden_layers, a.x, hb.hidden_rows, out));
  }
  return Head(a.x, hb.logit_rows, options.argmax_only, out);
}

// Activation replay (paper 001 §3 "Implementation", Alg. 1 line 7). Why it
// is right: a Mamba-2 layer's state after a token depends only on the state
// before its root path and, for each token on the path, its conv input
// (x, B and C come out of the conv over those inputs) and its raw dt — the
// in_proj columns the forward pass kept in the activation cache. Running the
// conv and the recurrence over them again from the committed state, with the
// same ops and in the same order as a forward pass over that path, rebuilds
// the state bit for bit, and recomputes no projection, attention or MLP. So
// verification never materialises the states of the tree's nodes: only the
// accepted path's state is ever built, once.
absl::Status HybridModel::Replay(const std::vector<int32_t>& rows, int32_t from, int32_t to,
                                 Mamba2StatePool* pool) {
  if (rows.empty()) return absl::InvalidArgumentError("hybrid: replay of an empty path");
  const int32_t n = static_cast<int32_t>(rows.size());
  SsmTreeBatch batch;
  batch.AddSequence(from, n, {});
  batch.out_rows = {n - 1};
  batch.out_slots = {to};
  TS_RETURN_IF_ERROR(batch.Plan(pool->num_slots()));
  TS_ASSIGN_OR_RETURN(Tensor rin, workspace_.Get(23, {n, conv_dim_ + ssm_heads_}));
  for (const Layer& w : layers_) {
    if (w.is_attention) continue;
    TS_RETURN_IF_ERROR(backend_->GatherRows(*pool->cache(w.index), rows, &rin));
    TS_RETURN_IF_ERROR(ConvScan(w.mixer, w.index, batch, rin, pool, nullptr));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::CopyHidden(int32_t layer, const std::vector<int32_t>& hidden_layers,
                                     const Tensor& x, const std::vector<int32_t>& rows,
                                     ForwardOutput* out) {
  const int64_t R = static_cast<int64_t>(rows.size()), D = config_.hidden_size;
  if (R == 0) return absl::OkStatus();
  for (size_t k = 0; k < hidden_layers.size(); ++k) {
    if (hidden_layers[k] != layer) continue;
    TS_ASSIGN_OR_RETURN(Tensor picked, workspace_.Get(11, {R, D}));
    TS_RETURN_IF_ERROR(backend_->GatherRows(x, rows, &picked));
    TS_RETURN_IF_ERROR(backend_->DownloadF32(picked, out->hidden.data() + k * R * D));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::Head(const Tensor& x, const std::vector<int32_t>& rows,
                               bool argmax_only, ForwardOutput* out) {
  Backend* be = backend_;
  const int64_t R = static_cast<int64_t>(rows.size()), D = config_.hidden_size;
  const int64_t V = config_.vocab_size;
  if (R == 0) return absl::OkStatus();
  TS_ASSIGN_OR_RETURN(Tensor xo, workspace_.Get(12, {R, D}));
  TS_RETURN_IF_ERROR(be->GatherRows(x, rows, &xo));
  TS_RETURN_IF_ERROR(be->RmsNorm(xo, norm_f_, static_cast<float>(config_.norm_eps), &xo));
  TS_ASSIGN_OR_RETURN(Tensor logits, workspace_.Get(13, {R, vocab_shard_}));
  TS_RETURN_IF_ERROR(be->Linear(xo, lm_head_, &logits));
  if (tp_ == 1) {
    if (argmax_only) return be->ArgmaxRows(logits, &out->argmax);
    out->logits.assign(R * V, 0.0f);
    return be->DownloadF32(logits, out->logits.data());
  }
  TS_ASSIGN_OR_RETURN(Tensor gathered, workspace_.Get(14, {tp_, R, vocab_shard_}));
  TS_RETURN_IF_ERROR(comm_->AllGather(logits, &gathered));
  std::vector<float> host(static_cast<size_t>(tp_) * R * vocab_shard_);
  TS_RETURN_IF_ERROR(be->DownloadF32(gathered, host.data()));
  out->logits.assign(R * V, 0.0f);
  for (int rk = 0; rk < tp_; ++rk) {
    for (int64_t row = 0; row < R; ++row) {
      std::memcpy(out->logits.data() + row * V + rk * vocab_shard_,
                  host.data() + (rk * R + row) * vocab_shard_, sizeof(float) * vocab_shard_);
    }
  }
  if (argmax_only) {
    for (int64_t row = 0; row < R; ++row) out->argmax.push_back(Argmax(out->row_logits(row), V));
    out->logits.clear();
  }
  return absl::OkStatus();
}

}  // namespace treespec
