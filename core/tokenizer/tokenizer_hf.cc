// Tokenizer over a Hugging Face tokenizer.json ("fast" tokenizer) with a BPE
// model: added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor,
// and the decoder chain compiled into DecodeRules.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/added_tokens.h"
#include "core/tokenizer/bpe.h"
#include "core/tokenizer/hf_decoder.h"
#include "core/util/json_fields.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/text_normalizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/tokenizer/utf8.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& file, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' ", what));
}

// tokenizer_class values whose transformers class rebuilds the post-processor
// from add_bos_token (default true) / add_eos_token (default false).
bool IsLlamaLikeClass(const std::string& cls) {
  for (const char* name : {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                           "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"}) {
    if (cls == name) return true;
  }
  return false;
}

class HfTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const std::string& path,
                                                           const TokenizerConfig& config);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> CreateFromJson(const json& root,
                                                                   const std::string& path,
                                                                   const TokenizerConfig& config);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return vocab_size_; }

 private:
  absl::Status ParsePostProcessor(const json& spec, const std::string& field,
                                  std::vector<int32_t>* prefix, std::vector<int32_t>* suffix);
  absl::Status BuildDecodeRules(const json& decoder, bool clean_up_spaces);
  int32_t TokenToId(const std::string& token) const;
  absl::Status EncodeText(std::string_view text, bool at_origin, std::vector<int32_t>* ids) const;

  std::string file_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TextNormalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized: false
  AddedTokenMatcher normalized_matcher_;  // the others, matched after normalizing
  std::vector<int32_t> prefix_;           // added around the text by add_special
  std::vector<int32_t> suffix_;
  int32_t vocab_size_ = 0;
};

int32_t HfTokenizer::TokenToId(const std::string& token) const {
  for (const AddedToken& t : added_) {
    if (t.content == token) return t.id;
  }
  return model_->TokenToId(token);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> HfTokenizer::Create(const std::string& path,
                                                               const TokenizerConfig& config) {
  TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TS_ASSIGN_OR_RETURN(json root, ParseJson(text, path));
  return CreateFromJson(root, path, config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> HfTokenizer::CreateFromJson(
    const json& root, const std::string& path, const TokenizerConfig& config) {
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto tok = std::make_unique<HfTokenizer>();
  tok->file_ = path;
  auto field = [&root](const char* key) -> const json& {
    static const json kNull;
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };

  const json& model = field("model");
  if (!model.is_object()) {
    return FieldError(path, "model", model.is_null() ? "is missing" : "must be an object");
  }
  auto type = model.find("type");
  std::string model_type;
  if (type != model.end() && type->is_string()) {
    model_type = type->get<std::string>();
  } else if (type == model.end() && model.contains("merges")) {
    model_type = "BPE";
  } else {
    return FieldError(path, "model.type", "is missing or not a string");
  }
  if (model_type != "BPE") {
    return absl::UnimplementedError(absl::StrCat(path, ": field 'model.type' = \"", model_type,
                                                 "\" is not supported (only BPE)"));
  }
  TS_ASSIGN_OR_RETURN(tok->model_, BpeModel::FromJson(model, path));
  TS_ASSIGN_OR_RETURN(tok->normalizer_, TextNormalizer::FromJson(field("normalizer"), path));
  TS_ASSIGN_OR_RETURN(tok->pre_tokenizer_, PreTokenizer::FromJson(field("pre_tokenizer"), path));
  TS_ASSIGN_OR_RETURN(tok->added_, ParseAddedTokens(field("added_tokens"), path));

  std::vector<AddedToken> raw, normalized;
  const int32_t model_ids = static_cast<int32_t>(tok->model_->id_to_token().size());
  int32_t max_id = model_ids - 1;
  for (size_t i = 0; i < tok->added_.size(); ++i) {
    const AddedToken& t = tok->added_[i];
    // Added tokens extend the vocabulary (or name ids in it): an id far past
    // both would size every per-id table by it.
    if (t.id >= model_ids + static_cast<int64_t>(tok->added_.size()) + BpeModel::kMaxUnusedIds) {
      return FieldError(path, absl::StrCat("added_tokens[", i, "].id"),
                        absl::StrCat("= ", t.id, " is far past the vocabulary's ", model_ids,
                                     " ids and the ", tok->added_.size(), " added tokens"));
    }
    (t.normalized ? normalized : raw).push_back(t);
    max_id = std::max(max_id, t.id);
  }
  tok->raw_matcher_ = AddedTokenMatcher(std::move(raw));
  tok->normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  tok->vocab_size_ = max_id + 1;
  tok->is_special_.assign(tok->vocab_size_, false);
  for (const AddedToken& t : tok->added_) {
    if (t.special) tok->is_special_[t.id] = true;
  }

  TS_RETURN_IF_ERROR(
      tok->ParsePostProcessor(field("post_processor"), "post_processor", &tok->prefix_, &tok->suffix_));
  const std::string dir = path.substr(0, path.find_last_of('/'));
  const HfTokenizer* self = tok.get();
  TS_ASSIGN_OR_RETURN(SpecialIds ids,
                      ResolveSpecialIds(config, dir,
                                        [self](const std::string& s) { return self->TokenToId(s); },
                                        -1, -1));
  tok->bos_id_ = ids.bos;
  tok->eos_ids_ = ids.eos;
  // transformers' Llama-family classes rebuild the template from the flags; for
  // others, flags in tokenizer_config.json override the post-processor.
  const bool llama_like = IsLlamaLikeClass(config.tokenizer_class);
  std::optional<bool> add_bos = config.add_bos_token;
  std::optional<bool> add_eos = config.add_eos_token;
  if (llama_like) {
    add_bos = add_bos.value_or(true);
    add_eos = add_eos.value_or(false);
  }
  if (add_bos.has_value()) {
    tok->prefix_.clear();
    if (*add_bos) {
      if (tok->bos_id_ < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, "/tokenizer_config.json: add_bos_token is set but there is no bos_token"));
      }
      tok->prefix_.push_back(tok->bos_id_);
    }
  }
  if (add_eos.has_value()) {
    tok->suffix_.clear();
    if (*add_eos) {
      if (tok->eos_ids_.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, "/tokenizer_config.json: add_eos_token is set but there is no eos_token"));
      }
      tok->suffix_.push_back(tok->eos_ids_[0]);
    }
  }
  TS_RETURN_IF_ERROR(tok->BuildDecodeRules(field("decoder"), config.clean_up_tokenization_spaces));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

// Post-processors, reduced to the ids they put around a single sequence.
absl::Status HfTokenizer::ParsePostProcessor(const json& spec, const std::string& field,
                                             std::vector<int32_t>* prefix,
                                             std::vector<int32_t>* suffix) {
  if (spec.is_null()) return absl::OkStatus();
  auto type_it = spec.find("type");
  if (!spec.is_object() || type_it == spec.end() || !type_it->is_string()) {
    return FieldError(file_, field + ".type", "is missing or not a string");
  }
  const std::string type = type_it->get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto list = spec.find("processors");
    if (list == spec.end() || !list->is_array()) {
      return FieldError(file_, field + ".processors", "must be a list");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      std::vector<int32_t> p, s;
      TS_RETURN_IF_ERROR(
          ParsePostProcessor((*list)[i], absl::StrCat(field, ".processors[", i, "]"), &p, &s));
      prefix->insert(prefix->begin(), p.begin(), p.end());
      suffix->insert(suffix->end(), s.begin(), s.end());
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key, int32_t* id) -> absl::Status {
      auto it = spec.find(key);
      if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return FieldError(file_, absl::StrCat(field, ".", key), "must be [token, id]");
      }
      *id = static_cast<int32_t>((*it)[1].get<int64_t>());
      return absl::OkStatus();
    };
    int32_t cls, sep;
    TS_RETURN_IF_ERROR(id_of("cls", &cls));
    TS_RETURN_IF_ERROR(id_of("sep", &sep));
    prefix->push_back(cls);
    suffix->push_back(sep);
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::UnimplementedError(
        absl::StrCat(file_, ": field '", field, ".type' = \"", type, "\" is not supported"));
  }
  auto single = spec.find("single");
  auto specials = spec.find("special_tokens");
  if (single == spec.end() || !single->is_array()) {
    return FieldError(file_, field + ".single", "must be a list");
  }
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string item_field = absl::StrCat(field, ".single[", i, "]");
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object() ||
        !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string()) {
      return FieldError(file_, item_field, "must be {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (specials == spec.end() || !specials->is_object() || !specials->contains(name) ||
        !(*specials)[name].is_object() || !(*specials)[name].contains("ids") ||
        !(*specials)[name]["ids"].is_array()) {
      return FieldError(file_, field + ".special_tokens",
                        absl::StrCat("has no entry with ids for '", name, "'"));
    }
    for (const json& id : (*specials)[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size_) {
        return FieldError(file_, absl::StrCat(field, ".special_tokens[\"", name, "\"].ids"),
                          absl::StrCat("has an invalid id ", JsonExcerpt(id)));
      }
      (seen_sequence ? suffix : prefix)->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::BuildDecodeRules(const json& decoder, bool clean_up_spaces) {
  // Token strings: added tokens first, as tokenizers' decode looks them up;
  // tokens whose string is a special token's are skipped.
  std::vector<std::string> tokens(vocab_size_);
  std::vector<bool> skip(vocab_size_, true);
  const auto& vocab = model_->id_to_token();
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (!vocab[id].empty()) {
      tokens[id] = vocab[id];
      skip[id] = false;
    }
  }
  std::vector<std::string> special_contents;
  for (const AddedToken& t : added_) {
    tokens[t.id] = t.content;
    skip[t.id] = false;
    if (t.special) special_contents.push_back(t.content);
  }
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (std::find(special_contents.begin(), special_contents.end(), tokens[id]) !=
        special_contents.end()) {
      skip[id] = true;
    }
  }
  decode_rules_.clean_up_spaces = clean_up_spaces;
  return BuildHfDecodeRules(decoder, file_, tokens, skip, &decode_rules_);
}

absl::Status HfTokenizer::EncodeText(std::string_view text, bool at_origin,
                                     std::vector<int32_t>* ids) const {
  std::string normalized(text);
  normalizer_->Apply(&normalized);
  for (const TextSegment& seg : normalized_matcher_.Split(normalized)) {
    if (seg.token_id >= 0) {
      ids->push_back(seg.token_id);
      continue;
    }
    std::vector<TextSplit> words{{normalized.substr(seg.begin, seg.end - seg.begin),
                                  at_origin && seg.begin == 0}};
    pre_tokenizer_->Apply(&words);
    for (const TextSplit& word : words) TS_RETURN_IF_ERROR(model_->EncodeWord(word.text, ids));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text,
                                                         bool add_special) const {
  size_t bad = 0;
  if (!IsValidUtf8(text, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (byte ", bad, " of ", text.size(), ")"));
  }
  std::vector<int32_t> ids;
  if (add_special) ids = prefix_;
  for (const TextSegment& seg : raw_matcher_.Split(text)) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
    } else {
      TS_RETURN_IF_ERROR(EncodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, &ids));
    }
  }
  if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  IncrementalDetokenizer detok(this);
  std::string text;
  for (int32_t id : ids) text += detok.Push(id);
  text += detok.Finish();
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                           const TokenizerConfig& config) {
  return HfTokenizer::Create(json_path, config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerFromJson(const nlohmann::json& root,
                                                                   const std::string& origin,
                                                                   const TokenizerConfig& config) {
  return HfTokenizer::CreateFromJson(root, origin, config);
}

}  // namespace treespec
