// Tokenizer: text <-> token ids for one model, loaded from a Hugging Face model
// directory (tokenizer.json, the HF "fast" format, or a SentencePiece
// tokenizer.model), with the BOS/EOS conventions of its tokenizer_config.json,
// generation_config.json and config.json. IncrementalDetokenizer turns a stream
// of generated ids into text chunks for streaming responses.
//
// Thread-safety: a loaded Tokenizer is immutable; Encode and Decode are const
// and may be called concurrently. An IncrementalDetokenizer belongs to one
// sequence and is not thread-safe; it must not outlive its Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace treespec {

// How ids become text, filled in once by each Tokenizer implementation. Decode
// (for tokenizer.json) and IncrementalDetokenizer both run these rules, so the
// streamed text always concatenates to the one-shot decode. The stages are:
//   1. per token: its bytes, a byte-fallback byte, or nothing (special tokens);
//   2. byte-fallback runs become text (rule `byte_runs`);
//   3. invalid UTF-8 (byte-level vocabularies) becomes U+FFFD, maximal subparts;
//   4. up to `strip_leading` leading `strip_char`s are dropped (HF Strip decoder);
//   5. transformers' clean_up_tokenization_spaces, when set.
struct DecodeRules {
  struct Piece {
    enum class Kind : uint8_t { kSkip, kText, kByte };
    Kind kind = Kind::kSkip;
    uint8_t byte = 0;               // kByte: the raw byte (<0xNN> tokens)
    bool strippable = false;        // kText: `text_at_start` may replace `text`
    bool has_leading_space = false; // SentencePiece: the piece starts with "▁"
    std::string text;               // kText: bytes (invalid UTF-8 allowed)
    std::string text_at_start;      // kText: used at the start of the output
  };
  // When `text_at_start` is used instead of `text`.
  enum class Start : uint8_t {
    kNever,
    kFirstToken,     // HF Metaspace decoder: the first non-skipped token
    kSentencePiece,  // SentencePiece's "bos whitespace" rule (see decode)
  };
  // What a run of byte-fallback tokens with invalid UTF-8 becomes.
  enum class ByteRuns : uint8_t {
    kPerByte,   // SentencePiece: one U+FFFD per invalid byte, valid chars kept
    kWholeRun,  // HF ByteFallback: the whole run becomes one U+FFFD per byte
  };

  std::vector<Piece> pieces;  // indexed by id; ids past the end are skipped
  Start start = Start::kNever;
  bool sp_remove_extra_whitespaces = false;
  ByteRuns byte_runs = ByteRuns::kWholeRun;
  // kSkip pieces end a byte run (SentencePiece) or are invisible (HF).
  bool skip_ends_byte_run = false;
  bool join_with_space = false;  // no decoder: tokens joined with " "
  int strip_leading = 0;
  char32_t strip_char = U' ';
  bool clean_up_spaces = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text (which must be valid UTF-8, else INVALID_ARGUMENT).
  // add_special: prepend BOS (and append EOS) exactly as the model's
  // tokenizer_config.json says (add_bos_token / add_eos_token; SentencePiece
  // default: BOS yes, EOS no; tokenizer.json without those keys: its
  // post_processor). Special-token strings inside `text` become their ids, as
  // in Hugging Face (SentencePiece models treat them as plain text).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special) const = 0;
  // Decodes ids to text (special tokens skipped), like HF
  // decode(skip_special_tokens=True). Ids out of range are ignored.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t vocab_size() const = 0;

  int32_t bos_id() const { return bos_id_; }  // -1 if none
  // From tokenizer_config.json (eos_token), generation_config.json and
  // config.json (eos_token_id, int or list), in that order, without repeats.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool IsSpecial(int32_t id) const;
  bool IsEos(int32_t id) const;

  const DecodeRules& decode_rules() const { return decode_rules_; }

 protected:
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
  std::vector<bool> is_special_;  // indexed by id
  DecodeRules decode_rules_;
};

// Loads from a Hugging Face model directory: tokenizer.json if present (HF fast
// tokenizer), else tokenizer.model (SentencePiece). `path` may also name one of
// those files directly (e.g. a llama2.c "tok512.model"); the config files are
// then looked up next to it. A "*.gguf" file loads the tokenizer embedded in
// its metadata (core/tokenizer/gguf_tokenizer.h). Errors name the file and field: NOT_FOUND (no
// tokenizer file), INVALID_ARGUMENT (malformed), UNIMPLEMENTED (model,
// normalizer, pre-tokenizer or decoder types this implementation lacks).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// Streaming detokenizer: Push(id) returns the newly completed text. It never
// emits part of a UTF-8 sequence (bytes wait until the character is complete),
// handles SentencePiece leading-space rules and byte-fallback tokens
// (<0xE2><0x82><0xAC> -> "€"). Finish() returns the rest (invalid trailing bytes
// become U+FFFD) and resets the detokenizer. The concatenation of all Push
// outputs and Finish equals tok->Decode(all ids).
//
// Latency: text is held back only while it could still change: an incomplete
// character; for HF byte-fallback vocabularies a whole run of <0xNN> tokens
// (HF turns a run with any invalid byte entirely into U+FFFD); and with
// clean_up_tokenization_spaces, a space or apostrophe at the end.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer* tok);
  std::string Push(int32_t id);
  std::string Finish();

 private:
  void PushPiece(const DecodeRules::Piece& piece, std::string* out);
  void EndByteRun(std::string* out);
  void EmitText(std::string_view bytes, std::string* out);   // stage 3
  void EmitChars(std::string_view chars, std::string* out);  // stage 4
  void EmitStripped(std::string_view chars, std::string* out);  // stage 5

  const DecodeRules* rules_;
  bool seen_token_ = false;         // a non-skipped token was pushed
  bool is_bos_ws_ = true;           // SentencePiece decode state
  bool bos_ws_seen_ = false;
  bool sp_text_nonempty_ = false;
  std::string byte_run_;            // stage 2: pending byte-fallback bytes
  std::string utf8_pending_;        // stage 3: incomplete character
  int strip_left_ = 0;              // stage 4
  std::string cleanup_pending_;     // stage 5
};

}  // namespace treespec
