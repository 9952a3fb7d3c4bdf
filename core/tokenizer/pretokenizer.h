// The "pre_tokenizer" stage of a Hugging Face tokenizer.json: splits normalized
// text into the pieces that BPE encodes one at a time. Supports Sequence,
// Metaspace, ByteLevel, Split (string patterns, and the GPT-2, Llama-3 and
// Qwen2 regexes, recognised verbatim and run by hand-written scanners, since
// RE2 lacks the look-ahead they use) and Digits. Immutable after FromJson;
// Apply is const and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace treespec {

// A piece of text between pipeline stages.
struct TextSplit {
  std::string text;
  bool at_origin = false;  // starts at offset 0 of the text given to Encode
};

// The split regexes this implementation knows (see FindRegexMatches).
enum class SplitRegex {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,   // kLlama3 with \p{N} instead of \p{N}{1,3}
};

// Appends the [begin, end) byte ranges of successive matches of `re` in valid
// UTF-8 `text`, as Oniguruma's find_iter would report them.
void FindRegexMatches(SplitRegex re, std::string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches);

// GPT-2's byte -> printable code point table used by ByteLevel.
const std::array<char32_t, 256>& ByteLevelAlphabet();
// The byte a ByteLevel code point stands for, or -1.
int ByteLevelByte(char32_t cp);

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer" (null: no splitting).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& spec,
                                                                const std::string& file);
  // Replaces *splits by their pre-tokens, in order.
  void Apply(std::vector<TextSplit>* splits) const;

  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    enum class Kind { kMetaspace, kByteLevel, kRegex, kString, kDigits };
    Kind kind;
    std::string text;  // kMetaspace: replacement; kString: pattern
    SplitRegex regex = SplitRegex::kGpt2;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    Prepend prepend = Prepend::kAlways;
    bool flag = false;  // kMetaspace: split; kByteLevel: add_prefix_space; kDigits: individual
    bool use_regex = true;
  };

 private:
  static absl::Status Parse(const nlohmann::json& spec, const std::string& file,
                            const std::string& field, std::vector<Step>* steps);
  static void ApplyStep(const Step& step, const TextSplit& in, std::vector<TextSplit>* out);
  std::vector<Step> steps_;
};

}  // namespace treespec
