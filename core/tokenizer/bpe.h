// The byte-pair-encoding model of a Hugging Face tokenizer.json
// ("model": {"type": "BPE", ...}): vocabulary, ranked merges, byte fallback,
// unknown-token fusing and ignore_merges, applied to one pre-token at a time.
// Immutable after FromJson; EncodeWord is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace treespec {

class BpeModel {
 public:
  // Ids a vocabulary may leave unused below its largest (and added tokens
  // may lie past it): ids are dense, and per-id tables are sized by the
  // largest (a 300-entry file with one id of 15.5 million made the decoder's
  // tables 1.1 GB; found by tokenizer_json_fuzz).
  static constexpr int64_t kMaxUnusedIds = 1 << 16;

  // `model` is tokenizer.json's "model" object; errors name `file` and the
  // field (e.g. "model.merges[12]").
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                            const std::string& file);

  // Appends the ids of `word` (valid UTF-8, one pre-token). INVALID_ARGUMENT if a
  // character is not in the vocabulary and there is neither byte fallback nor
  // an unk_token.
  absl::Status EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  int32_t TokenToId(absl::string_view token) const;  // -1 if absent
  // Token strings by id ("" for ids without a token).
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  const Merge* FindMerge(int32_t left, int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::vector<int32_t> byte_ids_;  // id of "<0xNN>" for each byte, -1 if absent
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace treespec
