#include "core/tokenizer/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/utf8.h"

namespace treespec {
namespace {

// Code point ending at byte `end` (exclusive) of valid UTF-8 `s`.
char32_t LastChar(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(s.substr(b, end - b), &cps, &offsets);
  *begin = b;
  return cps.empty() ? 0 : cps[0];
}

char32_t FirstChar(std::string_view s, size_t begin, size_t* end) {
  const size_t n = std::min(Utf8CharLength(static_cast<uint8_t>(s[begin])), s.size() - begin);
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(s.substr(begin, n), &cps, &offsets);
  *end = begin + n;
  return cps.empty() ? 0 : cps[0];
}

bool IsWordChar(char32_t c) {
  return c == U'_' || (U_GET_GC_MASK(c) & (U_GC_L_MASK | U_GC_N_MASK)) != 0;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), by_first_byte_(256) {
  for (int i = 0; i < static_cast<int>(tokens_.size()); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [this](int a, int b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

// Mirrors tokenizers' AddedVocabulary::find_matches: non-overlapping
// leftmost-longest matches; a single_word token must not touch word
// characters; lstrip / rstrip make the token swallow adjacent whitespace.
std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> segments;
  if (text.empty()) return segments;
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size() && !tokens_.empty()) {
    const AddedToken* hit = nullptr;
    for (int t : by_first_byte_[static_cast<uint8_t>(text[i])]) {
      const std::string& c = tokens_[t].content;
      if (text.compare(i, c.size(), c) == 0) {
        hit = &tokens_[t];
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t start = i;
    size_t stop = i + hit->content.size();
    i = stop;
    if (hit->single_word) {
      size_t unused;
      const bool start_space = start == 0 || !IsWordChar(LastChar(text, start, &unused));
      const bool stop_space = stop == text.size() || !IsWordChar(FirstChar(text, stop, &unused));
      if (!start_space || !stop_space) continue;
    }
    if (hit->lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t b;
        if (!u_isUWhiteSpace(LastChar(text, new_start, &b))) break;
        new_start = b;
      }
      start = std::max(new_start, start_offset);
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t e;
        if (!u_isUWhiteSpace(FirstChar(text, stop, &e))) break;
        stop = e;
      }
    }
    if (start_offset < start) segments.push_back({start_offset, start, -1});
    segments.push_back({start, stop, hit->id});
    start_offset = stop;
  }
  if (start_offset < text.size()) segments.push_back({start_offset, text.size(), -1});
  return segments;
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& list,
                                                         const std::string& file) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": field 'added_tokens' must be a list"));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& t = list[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' must be an object"));
    }
    AddedToken tok;
    auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= (1 << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": field '", field, ".id' must be an id in [0, 2^24)"));
    }
    tok.id = static_cast<int32_t>(id->get<int64_t>());
    auto content = t.find("content");
    if (content == t.end() || !content->is_string() || content->get<std::string>().empty() ||
        !IsValidUtf8(content->get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": field '", field, ".content' must be a non-empty string"));
    }
    tok.content = content->get<std::string>();
    auto flag = [&t](const char* key, bool fallback) {
      auto it = t.find(key);
      return it != t.end() && it->is_boolean() ? it->get<bool>() : fallback;
    };
    tok.single_word = flag("single_word", false);
    tok.lstrip = flag("lstrip", false);
    tok.rstrip = flag("rstrip", false);
    tok.special = flag("special", false);
    tok.normalized = flag("normalized", !tok.special);
    tokens.push_back(std::move(tok));
  }
  return tokens;
}

}  // namespace treespec
