// libFuzzer target: tokenizer_config.json text through the two readers of that
// file: ParseTokenizerConfigJson (special tokens, flags) and
// ChatTemplateFromTokenizerConfig (the "chat_template" field), whose template,
// when present, is parsed too.
#include <cstdint>
#include <string>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = treespec::fuzz::Bytes(data, size);
  treespec::TokenizerConfig config;
  if (treespec::ParseTokenizerConfigJson(text, "tokenizer_config.json", &config).ok()) {
    treespec::fuzz::Consume(config.bos_token.size() + config.eos_token.size());
  }
  auto source = treespec::ChatTemplateFromTokenizerConfig(text, "tokenizer_config.json");
  if (!source.ok() || !source->has_value()) return 0;
  auto tmpl = treespec::ChatTemplate::Parse(**source);
  if (!tmpl.ok()) return 0;
  const treespec::ChatMessage messages[] = {{"system", "Be brief."}, {"user", "Hi"},
                                            {"assistant", "Hello."}, {"user", "Bye"}};
  auto out = treespec::ApplyChatTemplate(*tmpl, messages, {true, config.bos_token,
                                                           config.eos_token});
  if (out.ok()) treespec::fuzz::Consume(out->size());
  return 0;
}
