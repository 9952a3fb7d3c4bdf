#include "core/tokenizer/text_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/tokenizer/utf8.h"
#include "core/util/json_fields.h"

namespace treespec {
namespace {

using nlohmann::json;

std::string Normalize(const icu::Normalizer2* norm, const std::string& text) {
  if (norm == nullptr) return text;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  norm->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                      nullptr, status);
  return U_SUCCESS(status) ? out : text;
}

// Rust's char::to_lowercase, character by character (full mappings, no
// context), as tokenizers' Lowercase does.
std::string Lowercase(const std::string& text) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(text, &cps, &offsets);
  std::string out;
  for (char32_t cp : cps) {
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(cp));
    UChar dst[8];
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
    if (U_FAILURE(status)) {
      AppendUtf8(cp, &out);
      continue;
    }
    for (int32_t i = 0; i < n;) {
      UChar32 c;
      U16_NEXT(dst, i, n, c);
      AppendUtf8(static_cast<char32_t>(c), &out);
    }
  }
  return out;
}

std::string StripWhitespace(const std::string& text, bool left, bool right) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(text, &cps, &offsets);
  size_t b = 0, e = cps.size();
  if (left) while (b < e && u_isUWhiteSpace(cps[b])) ++b;
  if (right) while (e > b && u_isUWhiteSpace(cps[e - 1])) --e;
  return text.substr(offsets[b], offsets[e] - offsets[b]);
}

}  // namespace

absl::Status TextNormalizer::Parse(const json& spec, const std::string& file,
                                   const std::string& field, std::vector<Step>* steps) {
  if (spec.is_null()) return absl::OkStatus();
  auto type_it = spec.find("type");
  if (!spec.is_object() || type_it == spec.end() || !type_it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": field '", field, ".type' is missing or not a string"));
  }
  const std::string type = type_it->get<std::string>();
  auto string_field = [&](const char* key, std::string* out) -> absl::Status {
    auto it = spec.find(key);
    if (it == spec.end() || !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": field '", field, ".", key, "' must be a string"));
    }
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  Step step;
  if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": field '", field, ".normalizers' must be a list"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      auto s = Parse((*it)[i], file, absl::StrCat(field, ".normalizers[", i, "]"), steps);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    if (auto s = string_field("prepend", &step.a); !s.ok()) return s;
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    auto p = spec.find("pattern");
    if (p == spec.end() || !p->is_object() || !p->contains("String") ||
        !(*p)["String"].is_string()) {
      return absl::UnimplementedError(absl::StrCat(
          file, ": field '", field, ".pattern' = ",
          p == spec.end() ? std::string("null") : JsonExcerpt(*p),
          " is not supported (only {\"String\": ...} patterns)"));
    }
    step.a = (*p)["String"].get<std::string>();
    if (auto s = string_field("content", &step.b); !s.ok()) return s;
    if (step.a.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": field '", field, ".pattern' is empty"));
    }
  } else if (type == "NFC") {
    step.kind = Step::Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Step::Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Step::Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Step::Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Step::Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    auto l = spec.find("strip_left");
    auto r = spec.find("strip_right");
    step.left = l != spec.end() && l->is_boolean() && l->get<bool>();
    step.right = r != spec.end() && r->is_boolean() && r->get<bool>();
  } else {
    return absl::UnimplementedError(
        absl::StrCat(file, ": field '", field, ".type' = \"", type, "\" is not supported"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TextNormalizer>> TextNormalizer::FromJson(const json& spec,
                                                                         const std::string& file) {
  auto n = std::make_unique<TextNormalizer>();
  if (auto s = Parse(spec, file, "normalizer", &n->steps_); !s.ok()) return s;
  return n;
}

void TextNormalizer::Apply(std::string* text) const {
  UErrorCode status = U_ZERO_ERROR;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kPrepend:
        if (!text->empty()) text->insert(0, step.a);
        break;
      case Step::Kind::kReplace:
        *text = absl::StrReplaceAll(*text, {{step.a, step.b}});
        break;
      case Step::Kind::kNfc:
        *text = Normalize(icu::Normalizer2::getNFCInstance(status), *text);
        break;
      case Step::Kind::kNfd:
        *text = Normalize(icu::Normalizer2::getNFDInstance(status), *text);
        break;
      case Step::Kind::kNfkc:
        *text = Normalize(icu::Normalizer2::getNFKCInstance(status), *text);
        break;
      case Step::Kind::kNfkd:
        *text = Normalize(icu::Normalizer2::getNFKDInstance(status), *text);
        break;
      case Step::Kind::kLowercase:
        *text = Lowercase(*text);
        break;
      case Step::Kind::kStrip:
        *text = StripWhitespace(*text, step.left, step.right);
        break;
    }
  }
}

}  // namespace treespec
