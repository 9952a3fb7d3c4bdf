// Model configurations parsed from a Hugging Face config.json.
//
// Parse*Config returns INVALID_ARGUMENT naming the file and field for a
// missing or mistyped required field, and UNIMPLEMENTED for an architecture or
// option treespec does not support. Plain structs; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace treespec {

// RoPE parameters, from either config layout: transformers >= 5 writes one
// `rope_parameters` object (rope_type, rope_theta, ...); older files have a
// top-level `rope_theta` and an optional `rope_scaling` object (type or
// rope_type). Every type transformers defines for the Llama family is
// computed as its modeling_rope_utils.py does (see LlamaConfig::InvFreq).
struct RopeScaling {
  // "linear", "dynamic", "yarn", "longrope" or "llama3" ("default" is no scaling).
  std::string type;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 8192;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0: absent
  double mscale_all_dim = 0.0;  // 0: absent
  bool truncate = true;
  // yarn and longrope: multiplies cos and sin (absent: derived from factor).
  std::optional<double> attention_factor;
  // longrope: per-frequency divisors [head_dim / 2].
  std::vector<double> short_factor, long_factor;
};

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // 0: RoPE rotates whole heads. Else only their first rotary_dim columns
  // (partial rotary; BambaForCausalLM: head_dim / 2), the rest pass unrotated.
  int64_t rotary_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  // Every layer attends only to keys at positions p with q - p < window
  // (transformers' sliding_window_overlay), tree nodes by their own position.
  std::optional<int64_t> sliding_window;
  bool qkv_bias = false;  // q/k/v projections have biases (attention_bias, Qwen2)
  bool o_bias = false;    // o_proj has a bias (attention_bias)
  bool mlp_bias = false;  // gate/up/down projections have biases (mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3)

  // RoPE inverse frequencies [RotaryDim() / 2], with the scaling applied.
  std::vector<float> InvFreq() const;
  int64_t RotaryDim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // The factor transformers multiplies cos and sin by (yarn, longrope; else 1).
  double RopeAttentionFactor() const;
  // Positions at or past this limit are refused by the model: "dynamic" and
  // "longrope" change the frequencies there with the length of each forward
  // call in transformers, which a cache of already-rotated keys cannot match.
  int64_t MaxExactPosition() const;
  int64_t NumParameters() const;
};

struct MambaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t state_size = 16;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;
  int64_t conv_kernel = 4;
  int64_t time_step_rank = 0;
  double layer_norm_epsilon = 1e-5;
  bool use_bias = false;
  bool use_conv_bias = true;
  bool tie_word_embeddings = true;

  int64_t NumParameters() const;
};

// Mamba2ForCausalLM and the Mamba-2 + attention hybrid BambaForCausalLM, one
// description for both (core/model/hybrid.h): every layer is a Mamba-2 mixer
// or an attention block, optionally followed by a SwiGLU MLP.
struct HybridConfig {
  // Tensor names and block structure: Mamba2ForCausalLM (backbone.*, norm ->
  // mixer -> residual) or BambaForCausalLM (model.*, input_layernorm -> mamba
  // or self_attn -> residual -> pre_ff_layernorm -> feed_forward -> residual).
  enum class Layout { kMamba2, kBamba };
  Layout layout = Layout::kMamba2;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  double norm_eps = 1e-5;  // every RMSNorm, the mixers' gated one included
  bool tie_word_embeddings = false;
  std::vector<bool> attention;  // [num_layers]: an attention layer, else a Mamba-2 mixer
  bool has_mlp = false;         // Bamba: each layer ends with pre_ff_layernorm + SwiGLU MLP
  // The Mamba-2 mixer.
  int64_t ssm_heads = 0;
  int64_t ssm_head_dim = 0;
  int64_t ssm_state = 0;
  int64_t ssm_groups = 1;
  int64_t conv_kernel = 4;
  int64_t chunk_size = 256;  // transformers' chunked prefill only; the math is the same
  bool conv_bias = true;
  bool proj_bias = false;  // in_proj / out_proj biases
  // Bamba's attention layers and MLPs: heads, head_dim, RoPE (rotary_dim),
  // biases and intermediate_size as for a Llama layer; unused by Mamba2.
  LlamaConfig attn;

  int64_t ssm_inner() const { return ssm_heads * ssm_head_dim; }
  // Conv channels: x | B | C.
  int64_t conv_dim() const { return ssm_inner() + 2 * ssm_groups * ssm_state; }
  int64_t num_attention_layers() const;
  int64_t NumParameters() const;
};

enum class Architecture { kLlama, kMamba, kMamba2, kHybrid };

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string architecture_name;  // as in config.json "architectures"[0]
  LlamaConfig llama;
  MambaConfig mamba;
  HybridConfig hybrid;  // kMamba2 and kHybrid
  std::vector<int64_t> eos_token_ids;  // from config.json (generation_config may add)
  std::optional<int64_t> bos_token_id;
  int64_t vocab_size() const {
    return arch == Architecture::kLlama   ? llama.vocab_size
           : arch == Architecture::kMamba ? mamba.vocab_size
                                          : hybrid.vocab_size;
  }
};

// Parses config.json text; `path` is used in error messages only.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& path);
// Reads <dir>/config.json (and <dir>/generation_config.json for eos ids), or
// the metadata of a "*.gguf" file (core/model/gguf_model.h).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace treespec
