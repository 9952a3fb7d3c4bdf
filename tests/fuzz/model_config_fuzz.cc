// libFuzzer target: config.json text through ParseModelConfig, and for every
// accepted Llama config the quantities derived from it (RoPE frequencies,
// attention factor, exact-position limit, parameter count).
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
  } else {
    treespec::fuzz::Consume(static_cast<size_t>(config->mamba.NumParameters()));
  }
  return 0;
}
