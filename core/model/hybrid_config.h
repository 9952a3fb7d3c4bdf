// Parsing of Mamba2ForCausalLM and BambaForCausalLM config.json files into a
// HybridConfig (core/model/config.h), as transformers 5's Mamba2Config and
// BambaConfig read them. Each field is read exactly, ignored when it only
// affects training or initialisation (initializer_range, time_step_min /
// max / floor, rescale_prenorm_residual, z_loss_coefficient), or refused
// naming the field when it changes the math in a way treespec does not
// compute. Called by ParseModelConfig. Pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/util/json_fields.h"

namespace treespec {

absl::StatusOr<HybridConfig> ParseMamba2Config(const JsonFields& f, const nlohmann::json& j);
// `attn`: the attention and MLP fields, parsed as for a Llama layer.
absl::StatusOr<HybridConfig> ParseBambaConfig(const JsonFields& f, const nlohmann::json& j,
                                              const LlamaConfig& attn);

}  // namespace treespec
