#include "core/model/llama.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/model/gguf_model.h"
#include "core/spec/sampling.h"
#include "core/spec/tree_packing.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status Divisible(const char* what, int64_t n, int tp) {
  if (n % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", what, " (", n,
                                                   ") is not divisible by tp size ", tp));
  }
  return absl::OkStatus();
}

std::string L(int64_t i, const char* suffix) {
  return absl::StrCat("model.layers.", i, ".", suffix);
}

}  // namespace

absl::Status LlamaModel::CheckShardable(const LlamaConfig& config, int tp) {
  TS_RETURN_IF_ERROR(Divisible("num_attention_heads", config.num_heads, tp));
  TS_RETURN_IF_ERROR(Divisible("num_key_value_heads", config.num_kv_heads, tp));
  TS_RETURN_IF_ERROR(Divisible("intermediate_size", config.intermediate_size, tp));
  return Divisible("vocab_size", config.vocab_size, tp);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const LlamaConfig& config,
                                                               WeightLoader* loader,
                                                               Communicator* comm) {
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->config_ = config;
  m->backend_ = loader->backend();
  m->workspace_.set_backend(m->backend_);
  m->comm_ = comm;
  if (comm != nullptr) m->shard_ = ShardSpec{comm->rank(), comm->size()};
  const int tp = m->shard_.size, r = m->shard_.rank;
  const int64_t D = config.hidden_size, Dh = config.head_dim, V = config.vocab_size;
  TS_RETURN_IF_ERROR(CheckShardable(config, tp));
  m->heads_ = config.num_heads / tp;
  m->kv_heads_ = config.num_kv_heads / tp;
  m->ffn_ = config.intermediate_size / tp;
  m->vocab_shard_ = V / tp;
  const int64_t H = config.num_heads, Hkv = config.num_kv_heads, F = config.intermediate_size;

  TS_ASSIGN_OR_RETURN(m->embed_, loader->Load("model.embed_tokens.weight", {V, D}));
  TS_ASSIGN_OR_RETURN(m->norm_, loader->LoadNorm("model.norm.weight", {D}));
  Checkpoint* ckpt = loader->checkpoint();
  if (config.tie_word_embeddings) {
    if (ckpt != nullptr) ckpt->Ignore("lm_head.weight");
    if (tp == 1) {
      m->lm_head_ = m->embed_;
    } else {
      TS_ASSIGN_OR_RETURN(m->lm_head_, loader->LoadRows({{"model.embed_tokens.weight", {V, D},
                                                          r * m->vocab_shard_,
                                                          (r + 1) * m->vocab_shard_}}));
    }
  } else {
    TS_ASSIGN_OR_RETURN(m->lm_head_, loader->LoadRows({{"lm_head.weight", {V, D},
                                                        r * m->vocab_shard_,
                                                        (r + 1) * m->vocab_shard_}}));
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    Layer layer;
    if (ckpt != nullptr) ckpt->Ignore(L(i, "self_attn.rotary_emb.inv_freq"));
    TS_ASSIGN_OR_RETURN(layer.ln1, loader->LoadNorm(L(i, "input_layernorm.weight"), {D}));
    TS_ASSIGN_OR_RETURN(layer.ln2, loader->LoadNorm(L(i, "post_attention_layernorm.weight"), {D}));
    const int64_t q0 = r * m->heads_ * Dh, q1 = (r + 1) * m->heads_ * Dh;
    const int64_t k0 = r * m->kv_heads_ * Dh, k1 = (r + 1) * m->kv_heads_ * Dh;
    TS_ASSIGN_OR_RETURN(
        layer.w_qkv,
        loader->LoadRowBlocks({{L(i, "self_attn.q_proj.weight"), {H * Dh, D}, q0, q1},
                               {L(i, "self_attn.k_proj.weight"), {Hkv * Dh, D}, k0, k1},
                               {L(i, "self_attn.v_proj.weight"), {Hkv * Dh, D}, k0, k1}}));
    TS_ASSIGN_OR_RETURN(layer.w_o,
                        loader->LoadCols(L(i, "self_attn.o_proj.weight"), {D, H * Dh}, q0, q1));
    const int64_t f0 = r * m->ffn_, f1 = (r + 1) * m->ffn_;
    TS_ASSIGN_OR_RETURN(layer.w_gate_up,
                        loader->LoadRowBlocks({{L(i, "mlp.gate_proj.weight"), {F, D}, f0, f1},
                                               {L(i, "mlp.up_proj.weight"), {F, D}, f0, f1}}));
    TS_ASSIGN_OR_RETURN(layer.w_down, loader->LoadCols(L(i, "mlp.down_proj.weight"), {D, F}, f0, f1));
    if (config.qkv_bias) {
      TS_ASSIGN_OR_RETURN(layer.b_qkv,
                          loader->LoadRows({{L(i, "self_attn.q_proj.bias"), {H * Dh}, q0, q1},
                                            {L(i, "self_attn.k_proj.bias"), {Hkv * Dh}, k0, k1},
                                            {L(i, "self_attn.v_proj.bias"), {Hkv * Dh}, k0, k1}}));
    }
    if (config.o_bias) {
      TS_ASSIGN_OR_RETURN(layer.b_o, loader->Load(L(i, "self_attn.o_proj.bias"), {D}));
    }
    if (config.mlp_bias) {
      TS_ASSIGN_OR_RETURN(layer.b_gate_up,
                          loader->LoadRows({{L(i, "mlp.gate_proj.bias"), {F}, f0, f1},
                                            {L(i, "mlp.up_proj.bias"), {F}, f0, f1}}));
      TS_ASSIGN_OR_RETURN(layer.b_down, loader->Load(L(i, "mlp.down_proj.bias"), {D}));
    }
    if (config.qk_norm) {
      TS_ASSIGN_OR_RETURN(layer.q_norm, loader->LoadNorm(L(i, "self_attn.q_norm.weight"), {Dh}));
      TS_ASSIGN_OR_RETURN(layer.k_norm, loader->LoadNorm(L(i, "self_attn.k_norm.weight"), {Dh}));
    }
    m->layers_.push_back(std::move(layer));
  }
  std::vector<float> inv = config.InvFreq();
  TS_ASSIGN_OR_RETURN(m->inv_freq_, m->backend_->Alloc(DType::kF32, {Dh / 2}));
  TS_RETURN_IF_ERROR(m->backend_->Upload(inv.data(), DType::kF32, &m->inv_freq_));
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& dir,
                                                             Backend* backend,
                                                             Communicator* comm) {
  if (IsGgufPath(dir)) return LoadGgufLlamaModel(dir, backend, comm);
  TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(dir));
  if (mc.arch != Architecture::kLlama) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": architecture ", mc.architecture_name, " is not a Llama model"));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
  WeightLoader loader(ckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, Create(mc.llama, &loader, comm));
  TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
  return model;
}

KvCacheOptions LlamaModel::KvOptions(int64_t num_blocks, int64_t block_size) const {
  KvCacheOptions o;
  o.num_layers = config_.num_layers;
  o.num_kv_heads = kv_heads_;
  o.head_dim = config_.head_dim;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  return o;
}

absl::Status LlamaModel::AddSequence(const ForwardSeq& s, size_t si, HostBatch* hb) const {
  const int64_t V = config_.vocab_size;
  AttentionBatch& batch = hb->attn;
  const int n = static_cast<int>(s.tokens.size());
  const int32_t base = batch.context_lens[si];
  const int32_t t0 = static_cast<int32_t>(hb->tokens.size());
  for (int i = 0; i < n; ++i) {
    if (s.tokens[i] < 0 || s.tokens[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", s.tokens[i],
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
  }
  hb->tokens.insert(hb->tokens.end(), s.tokens.begin(), s.tokens.end());
  if (s.parents.empty()) {
    for (int i = 0; i < n; ++i) hb->positions.push_back(base + s.num_prior + i);
  } else {
    const int prior = s.num_prior, total = prior + n;
    if (static_cast<int>(s.parents.size()) != total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tree: ", s.parents.size(), " parents for ", prior, " prior + ", n, " new nodes"));
    }
    PackedTree packed;
    TS_RETURN_IF_ERROR(PackTree(s.parents, &packed));
    const int words = packed.words_per_row;
    batch.mask_offset[si] = static_cast<int32_t>(batch.mask_words.size());
    batch.mask_words.insert(batch.mask_words.end(), packed.masks.begin() + prior * words,
                            packed.masks.end());
    for (int i = prior; i < total; ++i) hb->positions.push_back(base + packed.depth[i]);
    if (config_.sliding_window) {
      batch.tail_depth_offset[si] = static_cast<int32_t>(batch.tail_depths.size());
      batch.tail_depths.insert(batch.tail_depths.end(), packed.depth.begin(), packed.depth.end());
    }
  }
  const int64_t limit = config_.MaxExactPosition();
  for (int32_t i = t0; i < static_cast<int32_t>(hb->positions.size()); ++i) {
    if (hb->positions[i] >= limit) {
      return absl::OutOfRangeError(absl::StrCat(
          "position ", hb->positions[i], " is past ", limit, " (rope type '",
          config_.rope_scaling->type,
          "'): transformers switches frequencies there depending on each forward call's "
          "length while cached keys keep theirs, which treespec does not reproduce"));
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
  return absl::OkStatus();
}

absl::Status LlamaModel::DescribeBatch(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                                       HostBatch* hb, ForwardOutput* out) const {
  std::vector<int64_t> kv_ids;
  std::vector<int> num_new, num_prior;
  out->row_start.assign(1, 0);
  out->hidden_row_start.assign(1, 0);
  for (const ForwardSeq& s : seqs) {
    kv_ids.push_back(s.kv_seq);
    num_new.push_back(static_cast<int>(s.tokens.size()));
    num_prior.push_back(s.num_prior);
    if (s.num_prior < 0) return absl::InvalidArgumentError("forward: negative num_prior");
  }
  TS_ASSIGN_OR_RETURN(hb->attn, cache->BuildBatch(kv_ids, num_new, num_prior));
  if (config_.sliding_window) {
    hb->attn.sliding_window = static_cast<int32_t>(
        std::min<int64_t>(*config_.sliding_window, std::numeric_limits<int32_t>::max()));
    hb->attn.tail_depth_offset.assign(seqs.size(), -1);
  }
  for (size_t si = 0; si < seqs.size(); ++si) {
    TS_RETURN_IF_ERROR(AddSequence(seqs[si], si, hb));
    out->row_start.push_back(static_cast<int32_t>(hb->logit_rows.size()));
    out->hidden_row_start.push_back(static_cast<int32_t>(hb->hidden_rows.size()));
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::RunLayer(size_t l, const Tensor& pos, const AttentionPlan& plan,
                                  PagedKvCache* cache, const Tensor* next_ln, Activations* a) {
  Backend* be = backend_;
  const Layer& w = layers_[l];
  const int64_t T = a->x.dim(0), Dh = config_.head_dim;
  // yarn / longrope multiply cos and sin, hence q and k, by the attention
  // factor a; q·k scales by a², folded into the softmax scale.
  const double rope_af = config_.RopeAttentionFactor();
  const float scale =
      static_cast<float>(rope_af * rope_af) * (1.0f / std::sqrt(static_cast<float>(Dh)));
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const bool tp = shard_.size > 1;
  TS_RETURN_IF_ERROR(be->LinearRowBlocks(a->h, w.w_qkv, &a->qkv));
  if (config_.qkv_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->qkv, w.b_qkv));
  if (config_.qk_norm) {
    TS_RETURN_IF_ERROR(be->HeadRmsNorm(&a->qkv, w.q_norm, 0, heads_, eps));
    TS_RETURN_IF_ERROR(be->HeadRmsNorm(&a->qkv, w.k_norm, heads_, kv_heads_, eps));
  }
  TS_RETURN_IF_ERROR(be->QkvRope(a->qkv, pos, inv_freq_, plan, &a->q, cache->k(l), cache->v(l)));
  TS_RETURN_IF_ERROR(be->Attention(a->q, *cache->k(l), *cache->v(l), plan, scale, &a->attn));
  Tensor attn2 = a->attn.Reshape({T, heads_ * Dh});
  TS_RETURN_IF_ERROR(be->Linear(attn2, w.w_o, &a->h));
  if (tp) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&a->h));
  if (config_.o_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->h, w.b_o));
  TS_RETURN_IF_ERROR(be->AddRmsNorm(&a->x, a->h, w.ln2, eps, &a->h));
  TS_RETURN_IF_ERROR(be->LinearRowBlocks(a->h, w.w_gate_up, &a->gu));
  if (config_.mlp_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->gu, w.b_gate_up));
  TS_RETURN_IF_ERROR(be->SiluMul(a->gu, &a->act));
  TS_RETURN_IF_ERROR(be->Linear(a->act, w.w_down, &a->h));
  if (tp) TS_RETURN_IF_ERROR(comm_->AllReduceSum(&a->h));
  if (config_.mlp_bias) TS_RETURN_IF_ERROR(be->AddBias(&a->h, w.b_down));
  if (next_ln != nullptr) return be->AddRmsNorm(&a->x, a->h, *next_ln, eps, &a->h);
  return be->Add(a->x, a->h, &a->x);
}

absl::Status LlamaModel::Forward(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                                 ForwardOutput* out, const ForwardOptions& options) {
  const std::vector<int32_t>& hidden_layers = options.hidden_layers;
  const int64_t D = config_.hidden_size, Dh = config_.head_dim, V = config_.vocab_size;
  for (size_t k = 0; k < hidden_layers.size(); ++k) {
    if (hidden_layers[k] < 0 || hidden_layers[k] >= config_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("hidden_layers[", k, "] = ", hidden_layers[k],
                                                     " is not a layer in [0, ", config_.num_layers,
                                                     ")"));
    }
  }
  HostBatch hb;
  TS_RETURN_IF_ERROR(DescribeBatch(seqs, cache, &hb, out));
  const std::vector<int32_t>& logit_rows = hb.logit_rows;
  const int64_t T = static_cast<int64_t>(hb.tokens.size());
  out->vocab_size = V;
  out->hidden_size = D;
  out->hidden.assign(hidden_layers.size() * hb.hidden_rows.size() * D, 0.0f);
  out->argmax.clear();
  if (T == 0) {
    out->logits.clear();
    return absl::OkStatus();
  }

  // ---- device pass ------------------------------------------------------
  Backend* be = backend_;
  TS_ASSIGN_OR_RETURN(Tensor ids, be->Alloc(DType::kI32, {T}));
  TS_RETURN_IF_ERROR(be->Upload(hb.tokens.data(), DType::kI32, &ids));
  TS_ASSIGN_OR_RETURN(Tensor pos, be->Alloc(DType::kI32, {T}));
  TS_RETURN_IF_ERROR(be->Upload(hb.positions.data(), DType::kI32, &pos));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<AttentionPlan> plan, be->PlanAttention(hb.attn));

  Activations a;
  TS_ASSIGN_OR_RETURN(a.x, workspace_.Get(0, {T, D}));
  TS_ASSIGN_OR_RETURN(a.h, workspace_.Get(1, {T, D}));
  TS_ASSIGN_OR_RETURN(a.qkv, workspace_.Get(2, {T, (heads_ + 2 * kv_heads_) * Dh}));
  TS_ASSIGN_OR_RETURN(a.q, workspace_.Get(3, {T, heads_, Dh}));
  TS_ASSIGN_OR_RETURN(a.attn, workspace_.Get(4, {T, heads_, Dh}));
  TS_ASSIGN_OR_RETURN(a.gu, workspace_.Get(5, {T, 2 * ffn_}));
  TS_ASSIGN_OR_RETURN(a.act, workspace_.Get(6, {T, ffn_}));
  if (options.input_rows != nullptr) {
    if (options.input_rows->shape() != Shape{T, D}) {
      return absl::InvalidArgumentError(absl::StrCat("input_rows: shape is not [", T, ", ", D, "]"));
    }
    std::vector<int32_t> all(T);
    for (int64_t i = 0; i < T; ++i) all[i] = static_cast<int32_t>(i);
    TS_RETURN_IF_ERROR(be->GatherRows(*options.input_rows, all, &a.x));
  } else {
    TS_RETURN_IF_ERROR(be->Embedding(ids, embed_, &a.x));
  }
  if (!layers_.empty()) {
    TS_RETURN_IF_ERROR(
        be->RmsNorm(a.x, layers_[0].ln1, static_cast<float>(config_.rms_norm_eps), &a.h));
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Tensor* next_ln = l + 1 < layers_.size() ? &layers_[l + 1].ln1 : nullptr;
    TS_RETURN_IF_ERROR(RunLayer(l, pos, *plan, cache, next_ln, &a));
    TS_RETURN_IF_ERROR(
        CopyHidden(static_cast<int32_t>(l), hidden_layers, a.x, hb.hidden_rows, out));
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  out->logits.clear();
  if (R == 0) return absl::OkStatus();
  TS_ASSIGN_OR_RETURN(Tensor xo, workspace_.Get(7, {R, D}));
  TS_RETURN_IF_ERROR(be->GatherRows(a.x, logit_rows, &xo));
  TS_RETURN_IF_ERROR(be->RmsNorm(xo, norm_, static_cast<float>(config_.rms_norm_eps), &xo));
  TS_ASSIGN_OR_RETURN(Tensor logits, workspace_.Get(8, {R, vocab_shard_}));
  TS_RETURN_IF_ERROR(be->Linear(xo, lm_head_, &logits));
  if (shard_.size == 1 && !options.row_sampling.empty()) {
    return KeepProbsOnDevice(logits, options.row_sampling, out);
  }
  return OutputLogits(logits, R, options.argmax_only, out);
}

absl::Status LlamaModel::KeepProbsOnDevice(const Tensor& logits,
                                           const std::vector<SamplingParams>& row_sampling,
                                           ForwardOutput* out) {
  Backend* be = backend_;
  const int64_t S = static_cast<int64_t>(out->row_start.size()) - 1;
  if (static_cast<int64_t>(row_sampling.size()) != S) {
    return absl::InvalidArgumentError(absl::StrCat("forward: ", row_sampling.size(),
                                                   " row_sampling entries for ", S, " sequences"));
  }
  const int64_t R = logits.dim(0), V = config_.vocab_size;
  TS_RETURN_IF_ERROR(be->ArgmaxRows(logits, &out->argmax));
  TS_ASSIGN_OR_RETURN(Tensor probs, be->Alloc(DType::kF32, {R, V}));
  for (int64_t s = 0; s < S; ++s) {
    const SamplingParams& p = row_sampling[s];
    const int64_t begin = out->row_start[s], end = out->row_start[s + 1];
    if (p.greedy() || begin == end) continue;
    Tensor rows = probs.Rows(begin, end);
    TS_RETURN_IF_ERROR(
        be->ProcessLogitsRows(logits.Rows(begin, end), p.temperature, p.top_k, p.top_p, &rows));
  }
  out->fetch_probs = [be, probs, R](int64_t row, float* dst) -> absl::Status {
    if (row < 0 || row >= R) {
      return absl::OutOfRangeError(absl::StrCat("fetch_probs: row ", row, " is not in [0, ", R, ")"));
    }
    return be->DownloadF32(probs.Rows(row, row + 1), dst);
  };
  return absl::OkStatus();
}

absl::Status LlamaModel::OutputLogits(Tensor& logits, int64_t R, bool argmax_only,
                                      ForwardOutput* out) {
  Backend* be = backend_;
  const int64_t V = config_.vocab_size;
  if (shard_.size == 1) {
    if (argmax_only) return be->ArgmaxRows(logits, &out->argmax);
    out->logits.assign(R * V, 0.0f);
    return be->DownloadF32(logits, out->logits.data());
  }
  out->logits.assign(R * V, 0.0f);
  TS_ASSIGN_OR_RETURN(Tensor gathered, workspace_.Get(9, {shard_.size, R, vocab_shard_}));
  TS_RETURN_IF_ERROR(comm_->AllGather(logits, &gathered));
  std::vector<float> host(static_cast<size_t>(shard_.size) * R * vocab_shard_);
  TS_RETURN_IF_ERROR(be->DownloadF32(gathered, host.data()));
  for (int rk = 0; rk < shard_.size; ++rk) {
    for (int64_t row = 0; row < R; ++row) {
      std::memcpy(out->logits.data() + row * V + rk * vocab_shard_,
                  host.data() + (rk * R + row) * vocab_shard_, sizeof(float) * vocab_shard_);
    }
  }
  if (argmax_only) {
    // The shards' rows are only whole on the host here.
    for (int64_t row = 0; row < R; ++row) out->argmax.push_back(Argmax(out->row_logits(row), V));
    out->logits.clear();
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::CopyHidden(int32_t layer, const std::vector<int32_t>& hidden_layers,
                                    const Tensor& x, const std::vector<int32_t>& rows_wanted,
                                    ForwardOutput* out) {
  const int64_t R = static_cast<int64_t>(rows_wanted.size()), D = config_.hidden_size;
  if (R == 0) return absl::OkStatus();
  for (size_t k = 0; k < hidden_layers.size(); ++k) {
    if (hidden_layers[k] != layer) continue;
    TS_ASSIGN_OR_RETURN(Tensor rows, workspace_.Get(10, {R, D}));
    TS_RETURN_IF_ERROR(backend_->GatherRows(x, rows_wanted, &rows));
    TS_RETURN_IF_ERROR(backend_->DownloadF32(rows, out->hidden.data() + k * R * D));
  }
  return absl::OkStatus();
}

}  // namespace treespec
