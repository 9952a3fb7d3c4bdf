// Reads the facts the llama2.c converter needs from a SentencePiece model.
//
// Kept in its own translation unit: sentencepiece 0.1.97's header declares
// `absl::string_view` as std::string_view, which clashes with Abseil's own
// absl::string_view, so no file may include both. This header uses only std.
#pragma once

#include <string>

namespace treespec::convert {

struct SentencePieceInfo {
  int vocab_size = 0;
  int bos_id = -1;  // -1 when the model has no such piece
  int eos_id = -1;
  int unk_id = -1;
  std::string bos_piece, eos_piece, unk_piece;
};

// Loads `path`; on failure returns false and sets *error (without the path).
bool ReadSentencePieceInfo(const std::string& path, SentencePieceInfo* info, std::string* error);

}  // namespace treespec::convert
