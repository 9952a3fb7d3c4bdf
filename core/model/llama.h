// LlamaModel: the Llama family (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM: GQA, RoPE of every type in config.h,
// optional sliding window, q/k/v/o and MLP biases, Qwen3's per-head q/k
// RMSNorm, SwiGLU, RMSNorm, tied or untied embeddings) on any Backend,
// optionally tensor-parallel (Megatron: column-parallel q/k/v and gate/up with
// their bias slices, row-parallel o/down with an all-reduce after each and
// their biases added once after it, q/k norms replicated (they act per head),
// vocab-parallel LM head with an all-gather).
//
// Forward runs one packed pass over many sequences (prefill chunks, decode
// tokens and token trees together) against a PagedKvCache.
// Thread-compatible: one Forward at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/model/config.h"
#include "core/model/forward_batch.h"
#include "core/model/kv_cache.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "core/tensor/workspace.h"

namespace treespec {

class LlamaModel {
 public:
  // Loads weights through `loader` (checkpoint or random). `comm` may be null
  // (single rank); it must outlive the model.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const LlamaConfig& config,
                                                            WeightLoader* loader,
                                                            Communicator* comm);
  // Convenience: opens <dir> (config + checkpoint, or a "*.gguf" file), loads
  // on `backend`, and rejects tensors the model does not use.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& dir,
                                                          Backend* backend,
                                                          Communicator* comm = nullptr);

  // INVALID_ARGUMENT naming the field when `config` cannot be split over
  // `tp_size` ranks (heads, KV heads, FFN width or vocabulary not divisible).
  static absl::Status CheckShardable(const LlamaConfig& config, int tp_size);

  const LlamaConfig& config() const { return config_; }
  Backend* backend() const { return backend_; }
  int tp_rank() const { return shard_.rank; }
  int tp_size() const { return shard_.size; }
  // The token embedding table [vocab, hidden] (an EAGLE head reuses its target's).
  const Tensor& embedding() const { return embed_; }

  // KV cache geometry for this rank's share of the heads.
  KvCacheOptions KvOptions(int64_t num_blocks, int64_t block_size = 16) const;

  // One forward pass. KV for every new token is written at the sequence's
  // positions [length, length + n) (reserve first); committing is the caller's.
  // `options`: hidden states of chosen layers, argmax only (forward_batch.h).
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                       ForwardOutput* out, const ForwardOptions& options = {});

 private:
  struct Layer {
    Tensor ln1, w_o, ln2, w_down;
    RowBlocks w_qkv, w_gate_up;  // q | k | v and gate | up rows
    Tensor b_qkv, b_o, b_gate_up, b_down;  // empty when the config has no such bias
    Tensor q_norm, k_norm;                 // [head_dim], Qwen3 only
  };
  // The host side of one Forward: the attention batch and, packed over all
  // sequences, their new tokens, the tokens' positions and the rows whose
  // logits are wanted.
  struct HostBatch {
    AttentionBatch attn;
    std::vector<int32_t> tokens, positions, logit_rows;
    std::vector<int32_t> hidden_rows;  // ForwardSeq::hidden_all: every row; else logit_rows'
  };
  // One pass's activations (workspace tensors over T tokens).
  struct Activations {
    Tensor x, h, qkv, q, attn, gu, act;
  };
  LlamaModel() = default;
  // Builds `hb` for `seqs` and out->row_start; INVALID_ARGUMENT / OUT_OF_RANGE
  // naming the field for bad tokens, trees or positions.
  absl::Status DescribeBatch(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                             HostBatch* hb, ForwardOutput* out) const;
  // Appends sequence `si` of the batch: tokens, positions, tree mask, logit rows.
  absl::Status AddSequence(const ForwardSeq& s, size_t si, HostBatch* hb) const;
  // Decoder layer `l` over a->x in place (attention writes the layer's KV).
  // On entry a->h holds RmsNorm(x, ln1) (the previous layer's last op, or
  // Forward's); on return, with next_ln (the next layer's ln1), a->h holds
  // RmsNorm(x, next_ln): the residual add and that norm are one AddRmsNorm.
  // Without next_ln a->h is scratch.
  absl::Status RunLayer(size_t l, const Tensor& pos, const AttentionPlan& plan,
                        PagedKvCache* cache, const Tensor* next_ln, Activations* a);
  // Downloads rows `rows_wanted` of x [T, D] for each request of `layer`.
  absl::Status CopyHidden(int32_t layer, const std::vector<int32_t>& hidden_layers,
                          const Tensor& x, const std::vector<int32_t>& rows_wanted,
                          ForwardOutput* out);
  // logits [R, vocab_shard] of this rank -> out->logits or out->argmax.
  absl::Status OutputLogits(Tensor& logits, int64_t R, bool argmax_only, ForwardOutput* out);
  // Single rank with ForwardOptions::row_sampling: argmax of every row and
  // each sampled sequence's rows processed into probabilities on the device,
  // fetched row by row through out->fetch_probs. in: logits [R, vocab].
  absl::Status KeepProbsOnDevice(const Tensor& logits,
                                 const std::vector<SamplingParams>& row_sampling,
                                 ForwardOutput* out);

  LlamaConfig config_;
  Backend* backend_ = nullptr;
  Communicator* comm_ = nullptr;
  ShardSpec shard_;
  int64_t heads_ = 0, kv_heads_ = 0, ffn_ = 0, vocab_shard_ = 0;  // per rank
  Tensor embed_, norm_, lm_head_, inv_freq_;
  std::vector<Layer> layers_;
  Workspace workspace_;  // reused activations
};

}  // namespace treespec
