#include <string>
#include <string_view>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/utf8.h"

namespace treespec {
namespace {

// transformers' PreTrainedTokenizerBase.clean_up_tokenization: these
// replacements, in this order, each over the whole string.
std::string CleanUpTokenizationSpaces(std::string_view s) {
  static constexpr std::string_view kRules[][2] = {
      {" .", "."},    {" ?", "?"},     {" !", "!"},     {" ,", ","},      {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string text(s);
  for (const auto& rule : kRules) {
    if (text.find(rule[0]) == std::string::npos) continue;
    std::string next;
    size_t pos = 0;
    while (true) {
      const size_t hit = text.find(rule[0], pos);
      if (hit == std::string::npos) break;
      next.append(text, pos, hit - pos);
      next.append(rule[1]);
      pos = hit + rule[0].size();
    }
    next.append(text, pos, std::string::npos);
    text = std::move(next);
  }
  return text;
}

// The last position p (0 < p < s.size()) at which the clean-up may cut the text:
// CleanUp(s) == CleanUp(s[:p]) + CleanUp(s[p:]) for every continuation of s.
// Every rule's match starts with a space and, after earlier rules removed some
// spaces, covers a run of characters whose adjacent pairs are pairs of some
// pattern. So a match can only straddle p if s[p-1] is a space, or if
// (s[p-1], next surviving character) is a pattern pair: "' ", "n'", "'x",
// "ve", "re". A space at p may itself be removed (before . ? ! , or inside
// " ' "), which is why "n" before a space is not a safe cut either.
size_t LastSafeCleanUpCut(std::string_view s) {
  for (size_t p = s.size(); p-- > 1;) {
    const char c0 = s[p - 1];
    const char c1 = s[p];
    if ((static_cast<uint8_t>(c1) & 0xC0) == 0x80) continue;  // inside a character
    if (c0 == ' ' || c0 == '\'') continue;
    if (c0 == 'n' && (c1 == '\'' || c1 == ' ')) continue;
    if ((c0 == 'v' || c0 == 'r') && c1 == 'e') continue;
    return p;
  }
  return 0;
}

void AppendReplacements(size_t n, std::string* out) {
  for (size_t i = 0; i < n; ++i) out->append(kReplacementUtf8);
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tok)
    : rules_(&tok->decode_rules()), strip_left_(tok->decode_rules().strip_leading) {}

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string out;
  if (id >= 0 && static_cast<size_t>(id) < rules_->pieces.size()) {
    PushPiece(rules_->pieces[id], &out);
  }
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out;
  EndByteRun(&out);
  if (!utf8_pending_.empty()) {
    utf8_pending_.clear();
    EmitChars(kReplacementUtf8, &out);
  }
  if (!cleanup_pending_.empty()) {
    out.append(CleanUpTokenizationSpaces(cleanup_pending_));
    cleanup_pending_.clear();
  }
  seen_token_ = false;
  is_bos_ws_ = true;
  bos_ws_seen_ = false;
  sp_text_nonempty_ = false;
  strip_left_ = rules_->strip_leading;
  return out;
}

// Stages 1 and 2. The SentencePiece branch mirrors
// SentencePieceProcessor::Decode (sentencepiece 0.1.97): a piece loses its
// leading "▁" only while no text has been produced and no earlier piece lost
// one; control pieces end byte runs and count as pieces there, while HF drops
// special tokens before its decoders run.
void IncrementalDetokenizer::PushPiece(const DecodeRules::Piece& piece, std::string* out) {
  using Kind = DecodeRules::Piece::Kind;
  if (piece.kind == Kind::kByte) {
    byte_run_.push_back(static_cast<char>(piece.byte));
    if (rules_->byte_runs == DecodeRules::ByteRuns::kPerByte) {
      std::string ready;
      size_t i = 0;
      while (i < byte_run_.size()) {
        const Utf8Prefix p = ClassifyUtf8Prefix(std::string_view(byte_run_).substr(i));
        if (p.kind == Utf8Prefix::Kind::kIncomplete) break;
        if (p.kind == Utf8Prefix::Kind::kComplete) {
          ready.append(byte_run_, i, p.length);
          i += p.length;
        } else {
          ready.append(kReplacementUtf8);
          i += 1;
        }
      }
      byte_run_.erase(0, i);
      EmitText(ready, out);
    }
    return;
  }
  if (piece.kind == Kind::kSkip && !rules_->skip_ends_byte_run) return;
  EndByteRun(out);
  const bool sentencepiece = rules_->start == DecodeRules::Start::kSentencePiece;
  if (sentencepiece && (bos_ws_seen_ || sp_text_nonempty_)) is_bos_ws_ = false;
  if (piece.kind == Kind::kSkip) {
    bos_ws_seen_ = false;
    return;
  }
  std::string_view text = piece.text;
  if (sentencepiece) {
    if (piece.strippable && is_bos_ws_) {
      text = piece.text_at_start;
      bos_ws_seen_ = piece.has_leading_space && !rules_->sp_remove_extra_whitespaces;
    } else {
      bos_ws_seen_ = false;
    }
  } else if (rules_->start == DecodeRules::Start::kFirstToken && !seen_token_) {
    text = piece.text_at_start;
  }
  if (rules_->join_with_space && seen_token_) EmitText(" ", out);
  seen_token_ = true;
  EmitText(text, out);
}

void IncrementalDetokenizer::EndByteRun(std::string* out) {
  if (byte_run_.empty()) return;
  std::string ready;
  if (rules_->byte_runs == DecodeRules::ByteRuns::kPerByte) {
    // Only an incomplete character can be left: each of its bytes is invalid.
    AppendReplacements(byte_run_.size(), &ready);
  } else if (IsValidUtf8(byte_run_)) {
    ready = byte_run_;
  } else {
    AppendReplacements(byte_run_.size(), &ready);
  }
  byte_run_.clear();
  EmitText(ready, out);
}

// Stage 3: bytes -> complete characters; invalid maximal subparts -> U+FFFD.
void IncrementalDetokenizer::EmitText(std::string_view bytes, std::string* out) {
  if (bytes.empty()) return;
  sp_text_nonempty_ = true;
  utf8_pending_.append(bytes);
  std::string ready;
  size_t i = 0;
  while (i < utf8_pending_.size()) {
    if (static_cast<uint8_t>(utf8_pending_[i]) < 0x80) {
      ready.push_back(utf8_pending_[i++]);
      continue;
    }
    const Utf8Prefix p = ClassifyUtf8Prefix(std::string_view(utf8_pending_).substr(i));
    if (p.kind == Utf8Prefix::Kind::kIncomplete) break;
    if (p.kind == Utf8Prefix::Kind::kComplete) {
      ready.append(utf8_pending_, i, p.length);
    } else {
      ready.append(kReplacementUtf8);
    }
    i += p.length;
  }
  utf8_pending_.erase(0, i);
  EmitChars(ready, out);
}

// Stage 4: the HF Strip decoder after Fuse drops leading `strip_char`s.
void IncrementalDetokenizer::EmitChars(std::string_view chars, std::string* out) {
  size_t i = 0;
  while (strip_left_ > 0 && i < chars.size()) {
    std::vector<char32_t> cp;
    std::vector<uint32_t> offsets;
    const size_t n = Utf8CharLength(static_cast<uint8_t>(chars[i]));
    DecodeUtf8(chars.substr(i, n), &cp, &offsets);
    if (cp.size() == 1 && cp[0] == rules_->strip_char) {
      i += n;
      --strip_left_;
    } else {
      strip_left_ = 0;
    }
  }
  EmitStripped(chars.substr(i), out);
}

// Stage 5: clean_up_tokenization_spaces, applied to pieces cut where no
// replacement can straddle the cut.
void IncrementalDetokenizer::EmitStripped(std::string_view chars, std::string* out) {
  if (!rules_->clean_up_spaces) {
    out->append(chars);
    return;
  }
  cleanup_pending_.append(chars);
  const size_t cut = LastSafeCleanUpCut(cleanup_pending_);
  if (cut == 0) return;
  out->append(CleanUpTokenizationSpaces(std::string_view(cleanup_pending_).substr(0, cut)));
  cleanup_pending_.erase(0, cut);
}

}  // namespace treespec
