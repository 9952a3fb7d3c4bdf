// The "added_tokens" of a Hugging Face tokenizer.json (special tokens such as
// <s> or <|eot_id|>, and user-added tokens): found in text before the model
// sees it, never split. Matching is leftmost-longest like tokenizers'
// Aho-Corasick, with the lstrip / rstrip / single_word options. Immutable after
// construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace treespec {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A stretch of text: plain text [begin, end) or one added token.
struct TextSegment {
  size_t begin = 0;
  size_t end = 0;
  int32_t token_id = -1;  // -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Splits valid UTF-8 `text` into plain-text and added-token segments.
  std::vector<TextSegment> Split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::vector<int>> by_first_byte_;  // token indices, longest first
};

// Parses tokenizer.json's "added_tokens" list; errors name `file` and the field.
absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& list,
                                                         const std::string& file);

}  // namespace treespec
