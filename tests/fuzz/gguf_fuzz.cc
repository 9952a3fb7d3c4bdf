// libFuzzer target: a GGUF image through GgufFile::Parse (header, metadata,
// tensor directory), then everything treespec reads from an accepted file:
// the typed metadata getters, the Llama config, the embedded tokenizer (the
// gpt2 one built into a tokenizer.json document and loaded; the llama one
// serialized to a SentencePiece ModelProto, which is not loaded here because
// the SentencePiece plugin is dlopen'ed with RTLD_DEEPBIND, which ASan
// refuses), the chat template, and the dequantised checkpoint.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/gguf_model.h"
#include "core/tokenizer/gguf_tokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/util/gguf.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using treespec::fuzz::Consume;

void ReadMetadata(const treespec::GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    Consume(value.array_size());
    if (auto v = file.GetIntOr(key, 0); v.ok()) Consume(static_cast<size_t>(*v));
    if (auto v = file.GetFloatOr(key, 0); v.ok()) Consume(static_cast<size_t>(*v != 0));
    if (auto v = file.GetString(key); v.ok()) Consume(v->size());
    if (auto v = file.GetStringArray(key); v.ok()) Consume((*v)->size());
  }
}

void ReadTokenizer(const treespec::GgufFile& file) {
  if (auto doc = treespec::GgufToTokenizerJson(file); doc.ok()) {
    auto tok = treespec::LoadHfTokenizerFromJson(*doc, "fuzz.gguf", treespec::TokenizerConfig{});
    if (tok.ok()) {
      auto ids = (*tok)->Encode("Hello world <|endoftext|> déjà", /*add_special=*/true);
      if (ids.ok()) Consume((*tok)->Decode(*ids).size());
    }
  }
  if (auto proto = treespec::GgufToSentencePieceProto(file); proto.ok()) Consume(proto->size());
  if (auto tmpl = treespec::GgufChatTemplate(file); tmpl.ok()) Consume(tmpl->size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto owner = std::make_shared<std::vector<uint8_t>>(data, data + size);
  auto file = treespec::GgufFile::Parse(owner, owner->data(), owner->size(), "fuzz.gguf");
  if (!file.ok()) return 0;
  ReadMetadata(**file);
  ReadTokenizer(**file);
  auto config = treespec::GgufModelConfig(**file);
  if (!config.ok()) return 0;
  auto checkpoint = treespec::GgufCheckpoint(*file, config->llama);
  if (checkpoint.ok()) Consume((*checkpoint)->tensors().size());
  return 0;
}
