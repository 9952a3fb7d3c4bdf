// Pieces shared by the Tokenizer implementations (tokenizer_hf.cc,
// tokenizer_sentencepiece.cc) and LoadTokenizer. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "nlohmann/json.hpp"

namespace treespec {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                           const TokenizerConfig& config);
// The same from an already parsed tokenizer.json document (e.g. one built from
// GGUF metadata); `origin` names it in errors.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerFromJson(const nlohmann::json& root,
                                                                   const std::string& origin,
                                                                   const TokenizerConfig& config);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(
    const std::string& model_path, const TokenizerConfig& config);
// The same from a serialized ModelProto (e.g. one built from GGUF metadata).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizerFromBytes(
    const std::string& serialized, const std::string& origin, const TokenizerConfig& config);

struct SpecialIds {
  int32_t bos = -1;
  std::vector<int32_t> eos;
};

// BOS: tokenizer_config's bos_token, else bos_token_id, else `default_bos`.
// EOS: tokenizer_config's eos_token, then eos_token_id(s); `default_eos` if
// none. `lookup` maps a token string to its id or -1 (INVALID_ARGUMENT naming
// the field of `config_dir`/tokenizer_config.json).
absl::StatusOr<SpecialIds> ResolveSpecialIds(
    const TokenizerConfig& config, const std::string& config_dir,
    const std::function<int32_t(const std::string&)>& lookup, int32_t default_bos,
    int32_t default_eos);

}  // namespace treespec
