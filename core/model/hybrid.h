// HybridModel: Mamba2ForCausalLM and the Mamba-2 + attention hybrid
// BambaForCausalLM (HybridConfig, core/model/config.h) on any Backend that
// has the Mamba-2 tree ops, optionally tensor-parallel.
//
// A layer is a mixer, Mamba-2 or attention, with an optional SwiGLU MLP:
//   Mamba-2 mixer: in_proj -> [z | xBC | dt]; causal conv + SiLU over xBC;
//     selective scan; gated RMSNorm y·silu(z) per group; out_proj.
//   attention: Llama's (q/k/v projections, RoPE on the first rotary_dim
//     columns of each head, paged KV cache, tree masks), then o_proj.
// Mamba2ForCausalLM layers are norm -> mixer -> residual; Bamba's add
// pre_ff_layernorm -> MLP -> residual.
//
// Forward runs one packed pass over many sequences, chains and token trees,
// as the STree tree scan (paper 001 §3): the conv and scan follow each
// token's root path from its sequence's committed state (Backend::
// SsmTreeConv / SsmTreeScan over an SsmTreeBatch), attention layers use tree
// masks; on the CPU every token's output equals decoding its path token by
// token bit for bit. The pass keeps each new token's conv input and dt in
// the activation cache (Mamba2StatePool); Replay recomputes the state after
// an accepted path from them (paper 001 Alg. 1). The sequence bookkeeping is
// HybridSequenceModel's.
//
// Tensor parallelism (Megatron, as LlamaModel): Mamba-2 heads are split over
// ranks: in_proj's z, x and dt rows by head, B and C by group when
// n_groups % tp == 0 (else, with one group, replicated and the gated norm's
// sums of squares all-reduced), conv channels with their x / B / C, out_proj
// row-parallel + all-reduce; attention, MLP and LM head as Llama's.
// Thread-compatible: one call at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/model/config.h"
#include "core/model/forward_batch.h"
#include "core/model/kv_cache.h"
#include "core/model/mamba2_state.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "core/tensor/workspace.h"

namespace treespec {

// The Mamba-2 side of one Forward, built by the caller (HybridSequenceModel)
// for its T new tokens: `batch` has rows for tree nodes of earlier calls
// that new tokens descend from (`prior_rows`: their activation-cache rows)
// first, then the T new tokens in packed order. Each run in `keep` copies
// new tokens [first, first + n) into cache rows [cache_row, cache_row + n).
struct SsmPass {
  struct Keep {
    int32_t first = 0, n = 0, cache_row = 0;
  };
  SsmTreeBatch batch;  // planned
  std::vector<int32_t> prior_rows;
  std::vector<Keep> keep;
};

class HybridModel {
 public:
  static absl::StatusOr<std::unique_ptr<HybridModel>> Create(const HybridConfig& config,
                                                             WeightLoader* loader,
                                                             Communicator* comm);
  // Opens <dir> (config + checkpoint) and rejects tensors the model does not use.
  static absl::StatusOr<std::unique_ptr<HybridModel>> Load(const std::string& dir,
                                                           Backend* backend,
                                                           Communicator* comm = nullptr);
  // INVALID_ARGUMENT naming the field when `config` cannot be split over
  // `tp_size` ranks.
  static absl::Status CheckShardable(const HybridConfig& config, int tp_size);

  const HybridConfig& config() const { return config_; }
  Backend* backend() const { return backend_; }
  int tp_size() const { return tp_; }
  int64_t num_attention_layers() const { return config_.num_attention_layers(); }
  // KV cache geometry of the attention layers (this rank's heads).
  KvCacheOptions KvOptions(int64_t num_blocks, int64_t block_size) const;
  // State pool geometry of the Mamba-2 layers (this rank's share).
  Mamba2StateDims StateDims() const;

  // One forward pass. `cache` (null without attention layers) gets KV at the
  // sequences' positions [length, length + n) (ForwardSeq::kv_seq is the KV
  // cache's sequence id); `pool` gets the activations `pass` keeps and the
  // states its batch writes out.
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, const SsmPass& pass,
                       PagedKvCache* cache, Mamba2StatePool* pool, ForwardOutput* out,
                       const ForwardOptions& options = {});
  // Activation replay: the state after feeding the tokens in activation-cache
  // rows `rows` (a root path, root first) to the state in slot `from`,
  // written into slot `to` (!= from), every Mamba-2 layer.
  absl::Status Replay(const std::vector<int32_t>& rows, int32_t from, int32_t to,
                      Mamba2StatePool* pool);
  // Drops the activation buffers kept between passes (Workspace::Release), so
  // that the backend's peak memory over the next pass is what it needs.
  void ReleaseWorkspace() { workspace_.Release(); }

 private:
  struct Mixer {
    Tensor in_proj, in_bias, conv_w, conv_b, A, dt_bias, D, norm, out_proj, out_bias;
  };
  struct Attention {
    RowBlocks w_qkv;  // q | k | v rows
    Tensor b_qkv, w_o, b_o;
  };
  struct Layer {
    bool is_attention = false;
    int64_t index = 0;  // among the layers of its kind (KV cache / state pool layer)
    Tensor ln1, ln2;    // input norm; pre-MLP norm (has_mlp)
    Mixer mixer;
    Attention attn;
    RowBlocks w_gate_up;  // gate | up rows; has_mlp
    Tensor b_gate_up, w_down, b_down;
  };
  struct HostBatch;
  struct Activations;
  HybridModel() = default;
  absl::Status LoadMixer(int64_t i, WeightLoader* loader, Mixer* m);
  absl::Status LoadAttention(int64_t i, WeightLoader* loader, Layer* layer);
  absl::Status LoadMlp(int64_t i, WeightLoader* loader, Layer* layer);
  std::string Name(int64_t layer, const char* suffix) const;
  absl::Status DescribeBatch(const std::vector<ForwardSeq>& seqs, PagedKvCache* cache,
                             HostBatch* hb, ForwardOutput* out) const;
  absl::Status RunMixer(const Layer& w, const SsmPass& pass, Mamba2StatePool* pool,
                        Activations* a);
  absl::Status RunAttention(const Layer& w, const HostBatch& hb, PagedKvCache* cache,
                            Activations* a);
  absl::Status RunMlp(const Layer& w, Activations* a);
  // Runs the conv and scan of Mamba-2 layer `index` over `rin` [R, Cd + H].
  // out: y [R, H·P], or null (states only).
  absl::Status ConvScan(const Mixer& m, int64_t index, const SsmTreeBatch& batch,
                        const Tensor& rin, Mamba2StatePool* pool, Tensor* y);
  absl::Status CopyHidden(int32_t layer, const std::vector<int32_t>& hidden_layers,
                          const Tensor& x, const std::vector<int32_t>& rows, ForwardOutput* out);
  absl::Status Head(const Tensor& x, const std::vector<int32_t>& rows, bool argmax_only,
                    ForwardOutput* out);

  HybridConfig config_;
  Backend* backend_ = nullptr;
  Communicator* comm_ = nullptr;
  int tp_ = 1, rank_ = 0;
  // This rank's share: Mamba-2 heads, groups held (split or replicated),
  // inner width, conv channels; attention heads, KV heads, MLP width, vocab.
  int64_t ssm_heads_ = 0, ssm_groups_ = 0, ssm_inner_ = 0, conv_dim_ = 0;
  bool groups_split_ = true;
  int64_t heads_ = 0, kv_heads_ = 0, ffn_ = 0, vocab_shard_ = 0;
  Tensor embed_, norm_f_, lm_head_, inv_freq_;
  std::vector<Layer> layers_;
  Workspace workspace_;
};

}  // namespace treespec
