// The "normalizer" stage of a Hugging Face tokenizer.json: Sequence, Prepend,
// Replace (string patterns), NFC/NFD/NFKC/NFKD, Lowercase and Strip. Applied to
// each piece of text between added tokens. Immutable after FromJson; Apply is
// const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace treespec {

class TextNormalizer {
 public:
  // `spec` is tokenizer.json's "normalizer" (null: identity); errors name
  // `file` and the field. Unknown types are UNIMPLEMENTED.
  static absl::StatusOr<std::unique_ptr<TextNormalizer>> FromJson(const nlohmann::json& spec,
                                                                  const std::string& file);
  // Normalizes valid UTF-8 in place.
  void Apply(std::string* text) const;

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip };
    Kind kind;
    std::string a;  // kPrepend: prefix; kReplace: pattern
    std::string b;  // kReplace: content
    bool left = false, right = false;  // kStrip
  };
  static absl::Status Parse(const nlohmann::json& spec, const std::string& file,
                            const std::string& field, std::vector<Step>* steps);
  std::vector<Step> steps_;
};

}  // namespace treespec
