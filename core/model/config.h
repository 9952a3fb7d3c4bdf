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

struct RopeScaling {
  std::string type;  // "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window;

  // RoPE inverse frequencies [head_dim / 2] (with llama3 scaling applied).
  std::vector<float> InvFreq() const;
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

enum class Architecture { kLlama, kMamba };

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string architecture_name;  // as in config.json "architectures"[0]
  LlamaConfig llama;
  MambaConfig mamba;
  std::vector<int64_t> eos_token_ids;  // from config.json (generation_config may add)
  std::optional<int64_t> bos_token_id;
  int64_t vocab_size() const {
    return arch == Architecture::kLlama ? llama.vocab_size : mamba.vocab_size;
  }
};

// Parses config.json text; `path` is used in error messages only.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& path);
// Reads <dir>/config.json (and <dir>/generation_config.json for eos ids), or
// the metadata of a "*.gguf" file (core/model/gguf_model.h).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace treespec
