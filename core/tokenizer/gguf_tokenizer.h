// The tokenizer embedded in a GGUF file's metadata (tokenizer.ggml.*), built
// into the same objects the Hugging Face and SentencePiece loaders build:
//  * tokenizer.ggml.model = "gpt2": byte-level BPE. tokens + merges become a
//    tokenizer.json BPE model; tokenizer.ggml.pre names the pre-tokenizer
//    (llama.cpp's names: default / gpt2, smollm, llama-bpe / llama3, qwen2);
//    CONTROL tokens (token_type 3) become special added tokens, USER_DEFINED
//    ones (4) plain added tokens; the decoder is ByteLevel.
//  * tokenizer.ggml.model = "llama": SentencePiece BPE. tokens, scores and
//    token_type become a serialized SentencePiece ModelProto (identity
//    normalization, a dummy prefix unless tokenizer.ggml.add_space_prefix is
//    false, byte fallback when there are BYTE tokens).
// BOS/EOS come from tokenizer.ggml.bos_token_id / eos_token_id, and
// add_special follows tokenizer.ggml.add_bos_token / add_eos_token.
//
// Errors name the file and key: NOT_FOUND (required key missing),
// INVALID_ARGUMENT (wrong type, lengths that disagree, ids out of range,
// duplicate tokens, malformed merges), UNIMPLEMENTED (a tokenizer model or
// pre-tokenizer name not handled). The Tokenizer is immutable; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/gguf.h"
#include "nlohmann/json.hpp"

namespace treespec {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);

// tokenizer.chat_template, or "" when the file has none.
absl::StatusOr<std::string> GgufChatTemplate(const GgufFile& file);

// For the gpt2 model: the equivalent tokenizer.json document (exposed for tests).
absl::StatusOr<nlohmann::json> GgufToTokenizerJson(const GgufFile& file);
// For the llama model: the equivalent serialized SentencePiece ModelProto.
absl::StatusOr<std::string> GgufToSentencePieceProto(const GgufFile& file);

}  // namespace treespec
