#include "tools/convert/sentencepiece_info.h"

#include <sentencepiece_processor.h>

namespace treespec::convert {

bool ReadSentencePieceInfo(const std::string& path, SentencePieceInfo* info, std::string* error) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  info->vocab_size = sp.GetPieceSize();
  info->bos_id = sp.bos_id();
  info->eos_id = sp.eos_id();
  info->unk_id = sp.unk_id();
  if (info->bos_id >= 0) info->bos_piece = sp.IdToPiece(info->bos_id);
  if (info->eos_id >= 0) info->eos_piece = sp.IdToPiece(info->eos_id);
  if (info->unk_id >= 0) info->unk_piece = sp.IdToPiece(info->unk_id);
  return true;
}

}  // namespace treespec::convert
