// libFuzzer target: tokenizer.json text through the HF tokenizer loader
// (ParseJson + LoadHfTokenizerFromJson, as HfTokenizer::Create does), then
// every accepted tokenizer encodes and decodes a few fixed strings.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/util/json_fields.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto root = treespec::ParseJson(treespec::fuzz::Bytes(data, size), "tokenizer.json");
  if (!root.ok()) return 0;
  treespec::TokenizerConfig config;
  auto tok = treespec::LoadHfTokenizerFromJson(*root, "tokenizer.json", config);
  if (!tok.ok()) return 0;
  for (const char* text : {"", "Hello world", "  a\tb\n\nc  ", "<s></s><|endoftext|>",
                           "déjà vu 123 ☃ 😀", "\xff\xfe not utf-8"}) {
    for (bool special : {false, true}) {
      auto ids = (*tok)->Encode(text, special);
      if (!ids.ok()) continue;
      treespec::fuzz::Consume((*tok)->Decode(*ids).size());
    }
  }
  std::vector<int32_t> all;
  const int32_t n = std::min<int32_t>((*tok)->vocab_size() + 2, 512);
  for (int32_t id = -2; id < n; ++id) all.push_back(id);
  treespec::fuzz::Consume((*tok)->Decode(all).size());
  return 0;
}
