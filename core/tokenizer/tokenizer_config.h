// Tokenizer settings spread over a Hugging Face model directory's
// tokenizer_config.json, generation_config.json and config.json, each optional.
// Plain data; reading is a pure function of the files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace treespec {

struct TokenizerConfig {
  // tokenizer_config.json
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string bos_token;  // "" when absent; string or {"content": ...} in the file
  std::string eos_token;
  std::string tokenizer_class;
  bool clean_up_tokenization_spaces = false;
  // generation_config.json, then config.json: eos_token_id (int or list).
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;  // bos_token_id from the same files, -1 if absent
};

// Reads the three files from `dir`; a missing file is not an error, a malformed
// one is INVALID_ARGUMENT naming the file and field.
absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& dir);

// The tokenizer_config.json fields of `text` (add_bos_token, add_eos_token,
// bos_token, eos_token, clean_up_tokenization_spaces, tokenizer_class) into
// *cfg; INVALID_ARGUMENT naming `path` and the field.
absl::Status ParseTokenizerConfigJson(const std::string& text, const std::string& path,
                                      TokenizerConfig* cfg);

}  // namespace treespec
