// libFuzzer target: config.json text through ParseModelConfig, and for every
// accepted config the quantities derived from it (Llama: RoPE frequencies,
// attention factor, exact-position limit, parameter count; Mamba: parameter
// count; Mamba-2 / hybrid: parameter count, conv channels, RoPE frequencies).
#include <cstdint>
#include <string>

#include "core/model/config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = treespec::fuzz::Bytes(data, size);
  auto config = treespec::ParseModelConfig(text, "config.json");
  if (!config.ok()) return 0;
  if (config->arch == treespec::Architecture::kLlama) {
    const treespec::LlamaConfig& llama = config->llama;
    treespec::fuzz::Consume(llama.InvFreq().size());
    treespec::fuzz::Consume(static_cast<size_t>(llama.RopeAttentionFactor()));
    treespec::fuzz::Consume(static_cast<size_t>(llama.MaxExactPosition()));
    treespec::fuzz::Consume(static_cast<size_t>(llama.NumParameters()));
  } else if (config->arch == treespec::Architecture::kMamba) {
    treespec::fuzz::Consume(static_cast<size_t>(config->mamba.NumParameters()));
  } else {
    const treespec::HybridConfig& hybrid = config->hybrid;
    treespec::fuzz::Consume(static_cast<size_t>(hybrid.NumParameters()));
    treespec::fuzz::Consume(static_cast<size_t>(hybrid.conv_dim()));
    if (hybrid.num_attention_layers() > 0) treespec::fuzz::Consume(hybrid.attn.InvFreq().size());
  }
  return 0;
}
