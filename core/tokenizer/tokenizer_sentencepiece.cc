// Tokenizer over a SentencePiece tokenizer.model, through the absl-free
// wrapper (TOOLCHAIN.md pitfall 3). Encode and Decode are the library's own;
// the DecodeRules mirror the library's Decode for IncrementalDetokenizer.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/sentencepiece_wrapper.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/tokenizer/utf8.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁"

std::string ReplaceSpaceSymbols(std::string_view piece) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = piece.find(kSpaceSymbol, pos);
    if (hit == std::string_view::npos) break;
    out.append(piece.substr(pos, hit - pos));
    out.push_back(' ');
    pos = hit + kSpaceSymbol.size();
  }
  out.append(piece.substr(pos));
  return out;
}

// "<0xNN>" -> NN, or -1.
int ParseBytePiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const std::string& path,
                                                           const TokenizerConfig& config);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> CreateFromBytes(const std::string& bytes,
                                                                    const std::string& path,
                                                                    const TokenizerConfig& config);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return model_->vocab_size(); }

 private:
  void BuildDecodeRules();

  std::unique_ptr<sp_internal::SentencePieceModel> model_;
  std::string path_;
  bool add_bos_ = true;
  bool add_eos_ = false;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> SentencePieceTokenizer::Create(
    const std::string& path, const TokenizerConfig& config) {
  TS_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return CreateFromBytes(bytes, path, config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> SentencePieceTokenizer::CreateFromBytes(
    const std::string& bytes, const std::string& path, const TokenizerConfig& config) {
  auto tok = std::make_unique<SentencePieceTokenizer>();
  tok->path_ = path;
  std::string error;
  tok->model_ = sp_internal::SentencePieceModel::Load(bytes, &error);
  if (tok->model_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid SentencePiece model: ", error));
  }
  const sp_internal::SentencePieceModel& m = *tok->model_;
  const std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos
                                             ? 0
                                             : path.find_last_of('/'));
  TS_ASSIGN_OR_RETURN(
      SpecialIds ids,
      ResolveSpecialIds(config, dir.empty() ? "." : dir,
                        [&m](const std::string& s) { return m.PieceToId(s); }, m.bos_id(),
                        m.eos_id()));
  tok->bos_id_ = ids.bos;
  tok->eos_ids_ = ids.eos;
  tok->add_bos_ = config.add_bos_token.value_or(true);
  tok->add_eos_ = config.add_eos_token.value_or(false);
  if (tok->add_bos_ && tok->bos_id_ < 0 && config.add_bos_token.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tokenizer_config.json sets add_bos_token but the model has no BOS piece"));
  }
  if (tok->add_eos_ && tok->eos_ids_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tokenizer_config.json sets add_eos_token but the model has no EOS piece"));
  }
  tok->is_special_.resize(m.vocab_size());
  for (int id = 0; id < m.vocab_size(); ++id) tok->is_special_[id] = m.IsControl(id);
  tok->BuildDecodeRules();
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

void SentencePieceTokenizer::BuildDecodeRules() {
  const sp_internal::SentencePieceModel& m = *model_;
  const sp_internal::NormalizerInfo& norm = m.normalizer();
  const bool strip = norm.add_dummy_prefix || norm.remove_extra_whitespaces;
  std::string unk_surface;
  if (m.unk_id() >= 0) {
    std::string error;
    if (!m.Decode({m.unk_id()}, &unk_surface, &error)) unk_surface.clear();
  }
  DecodeRules& rules = decode_rules_;
  rules.start = DecodeRules::Start::kSentencePiece;
  rules.sp_remove_extra_whitespaces = norm.remove_extra_whitespaces;
  rules.byte_runs = DecodeRules::ByteRuns::kPerByte;
  rules.skip_ends_byte_run = true;
  rules.pieces.resize(m.vocab_size());
  for (int id = 0; id < m.vocab_size(); ++id) {
    DecodeRules::Piece& p = rules.pieces[id];
    const std::string piece = m.IdToPiece(id);
    if (m.IsControl(id)) {
      p.kind = DecodeRules::Piece::Kind::kSkip;
    } else if (m.IsByte(id) && ParseBytePiece(piece) >= 0) {
      p.kind = DecodeRules::Piece::Kind::kByte;
      p.byte = static_cast<uint8_t>(ParseBytePiece(piece));
    } else if (m.IsUnknown(id)) {
      p.kind = DecodeRules::Piece::Kind::kText;
      p.text = unk_surface;
    } else {
      p.kind = DecodeRules::Piece::Kind::kText;
      p.strippable = true;
      p.text = ReplaceSpaceSymbols(piece);
      if (strip && piece.compare(0, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
        p.has_leading_space = true;
        p.text_at_start = ReplaceSpaceSymbols(std::string_view(piece).substr(kSpaceSymbol.size()));
      } else {
        p.text_at_start = p.text;
      }
    }
  }
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool add_special) const {
  size_t bad = 0;
  if (!IsValidUtf8(text, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (byte ", bad, " of ", text.size(), ")"));
  }
  std::vector<int> ids;
  std::string error;
  if (!model_->Encode(std::string(text), &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": encode failed: ", error));
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  if (add_special && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_special && add_eos_ && !eos_ids_.empty()) out.push_back(eos_ids_[0]);
  return out;
}

std::string SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<int> valid;
  valid.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < model_->vocab_size()) valid.push_back(id);
  }
  std::string text;
  std::string error;
  if (!model_->Decode(valid, &text, &error)) return std::string();
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(
    const std::string& model_path, const TokenizerConfig& config) {
  return SentencePieceTokenizer::Create(model_path, config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizerFromBytes(
    const std::string& serialized, const std::string& origin, const TokenizerConfig& config) {
  return SentencePieceTokenizer::CreateFromBytes(serialized, origin, config);
}

}  // namespace treespec
