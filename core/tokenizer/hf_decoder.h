// Compiles the "decoder" chain of a Hugging Face tokenizer.json into the
// DecodeRules that Decode and IncrementalDetokenizer run. Pure function.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace treespec {

// `tokens[id]` is the string tokenizers' decode would see for id (the added
// token's content, else the model's token); `skip[id]` marks ids that decode
// to nothing (absent, or special with skip_special_tokens). Fills
// rules->pieces, start, byte_runs, join_with_space and strip_*; errors name
// `file` and the field (UNIMPLEMENTED for decoder types and orders not
// supported).
absl::Status BuildHfDecodeRules(const nlohmann::json& decoder, const std::string& file,
                                const std::vector<std::string>& tokens,
                                const std::vector<bool>& skip, DecodeRules* rules);

}  // namespace treespec
