#include "core/tokenizer/pretokenizer.h"

#include <unicode/uchar.h>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/utf8.h"
#include "core/util/json_fields.h"

namespace treespec {
namespace {

using nlohmann::json;

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Oniguruma's classes for UTF-8 patterns: \p{L}, \p{N} are general categories,
// \s is the White_Space property.
bool IsLetter(char32_t c) { return (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0; }
bool IsNumber(char32_t c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }
bool IsSpace(char32_t c) { return u_isUWhiteSpace(c); }
bool IsOther(char32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }
bool IsNewline(char32_t c) { return c == U'\r' || c == U'\n'; }

char32_t FoldCase(char32_t c, bool ignore_case) {
  if (!ignore_case) return c;
  if (c >= U'A' && c <= U'Z') return c - U'A' + U'a';
  if (c == 0x017F) return U's';  // LATIN SMALL LETTER LONG S folds to 's'
  return c;
}

// 's|'t|'re|'ve|'m|'ll|'d at i; returns the end or i.
size_t MatchContraction(const std::vector<char32_t>& c, size_t i, bool ignore_case) {
  const size_t n = c.size();
  if (c[i] != U'\'' || i + 1 >= n) return i;
  const char32_t a = FoldCase(c[i + 1], ignore_case);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
  if (i + 2 < n) {
    const char32_t b = FoldCase(c[i + 2], ignore_case);
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
      return i + 3;
    }
  }
  return i;
}

size_t SkipWhile(const std::vector<char32_t>& c, size_t i, bool (*pred)(char32_t)) {
  while (i < c.size() && pred(c[i])) ++i;
  return i;
}

// \s+(?!\S)|\s+ at a whitespace character: the run, less its last character
// when a non-space follows and the run is longer than one.
size_t MatchTrailingSpace(const std::vector<char32_t>& c, size_t i) {
  const size_t end = SkipWhile(c, i, IsSpace);
  if (end == c.size() || end - i < 2) return end;
  return end - 1;
}

// The GPT-2 pattern, alternatives tried in order at i (leftmost-first).
size_t MatchGpt2(const std::vector<char32_t>& c, size_t i) {
  const size_t n = c.size();
  if (size_t e = MatchContraction(c, i, /*ignore_case=*/false); e > i) return e;
  const size_t j = c[i] == U' ' ? i + 1 : i;
  if (j < n) {
    if (IsLetter(c[j])) return SkipWhile(c, j, IsLetter);
    if (IsNumber(c[j])) return SkipWhile(c, j, IsNumber);
    if (IsOther(c[j])) return SkipWhile(c, j, IsOther);
  }
  if (IsSpace(c[i])) return MatchTrailingSpace(c, i);
  return i;
}

// The Llama-3 / Qwen2 pattern; `max_digits` is 3 or 1.
size_t MatchLlama3(const std::vector<char32_t>& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  if (size_t e = MatchContraction(c, i, /*ignore_case=*/true); e > i) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!IsNewline(c[i]) && !IsLetter(c[i]) && !IsNumber(c[i]) && i + 1 < n && IsLetter(c[i + 1])) {
    return SkipWhile(c, i + 1, IsLetter);
  }
  if (IsLetter(c[i])) return SkipWhile(c, i, IsLetter);
  // \p{N}{1,3}
  if (IsNumber(c[i])) {
    size_t e = i;
    while (e < n && e - i < max_digits && IsNumber(c[e])) ++e;
    return e;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t j = c[i] == U' ' ? i + 1 : i;
  if (j < n && IsOther(c[j])) {
    return SkipWhile(c, SkipWhile(c, j, IsOther), IsNewline);
  }
  if (IsSpace(c[i])) {
    // \s*[\r\n]+: backtracking leaves the match at the run's last newline.
    const size_t end = SkipWhile(c, i, IsSpace);
    for (size_t k = end; k > i; --k) {
      if (IsNewline(c[k - 1])) return k;
    }
    return MatchTrailingSpace(c, i);
  }
  return i;
}

// (offsets, is_match) pieces covering `size` bytes, as tokenizers' Pattern::find_matches.
using Pieces = std::vector<std::pair<std::pair<size_t, size_t>, bool>>;

Pieces CoverWithMatches(size_t size, const std::vector<std::pair<size_t, size_t>>& matches) {
  Pieces pieces;
  if (size == 0) return {{{0, 0}, false}};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) pieces.push_back({{prev, b}, false});
    pieces.push_back({{b, e}, true});
    prev = e;
  }
  if (prev != size) pieces.push_back({{prev, size}, false});
  return pieces;
}

// Each character satisfying `pred` is one match.
std::vector<std::pair<size_t, size_t>> CharMatches(std::string_view text,
                                                   bool (*pred)(char32_t, char32_t),
                                                   char32_t arg) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(text, &cps, &offsets);
  std::vector<std::pair<size_t, size_t>> matches;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (pred(cps[i], arg)) matches.push_back({offsets[i], offsets[i + 1]});
  }
  return matches;
}

// tokenizers' NormalizedString::split: invert, apply the behaviour, drop
// removed and empty pieces.
void SplitWith(const TextSplit& in, const std::vector<std::pair<size_t, size_t>>& matches,
               PreTokenizer::Behavior behavior, bool invert, std::vector<TextSplit>* out) {
  using Behavior = PreTokenizer::Behavior;
  Pieces pieces = CoverWithMatches(in.text.size(), matches);
  if (invert) {
    for (auto& p : pieces) p.second = !p.second;
  }
  Pieces result;  // (offsets, remove)
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& p : pieces) result.push_back({p.first, false});
      break;
    case Behavior::kRemoved:
      result = pieces;
      break;
    case Behavior::kContiguous: {
      bool previous = false;
      for (const auto& p : pieces) {
        if (p.second == previous && !result.empty()) {
          result.back().first.second = p.first.second;
        } else {
          result.push_back({p.first, false});
        }
        previous = p.second;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous = false;
      for (const auto& p : pieces) {
        if (p.second && !previous && !result.empty()) {
          result.back().first.second = p.first.second;
        } else {
          result.push_back({p.first, false});
        }
        previous = p.second;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->second && !previous && !result.empty()) {
          result.back().first.first = it->first.first;
        } else {
          result.push_back({it->first, false});
        }
        previous = it->second;
      }
      std::reverse(result.begin(), result.end());
      break;
    }
  }
  for (const auto& [range, remove] : result) {
    if (remove || range.second <= range.first) continue;
    out->push_back({in.text.substr(range.first, range.second - range.first),
                    in.at_origin && range.first == 0});
  }
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string ByteLevelEncode(std::string_view s) {
  const auto& alphabet = ByteLevelAlphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) AppendUtf8(alphabet[static_cast<uint8_t>(c)], &out);
  return out;
}

absl::Status FieldError(const std::string& file, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' ", what));
}

}  // namespace

void FindRegexMatches(SplitRegex re, std::string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  DecodeUtf8(text, &cps, &offsets);
  size_t i = 0;
  while (i < cps.size()) {
    const size_t e = re == SplitRegex::kGpt2     ? MatchGpt2(cps, i)
                     : re == SplitRegex::kLlama3 ? MatchLlama3(cps, i, 3)
                                                 : MatchLlama3(cps, i, 1);
    if (e > i) {
      matches->push_back({offsets[i], offsets[e]});
      i = e;
    } else {
      ++i;
    }
  }
}

const std::array<char32_t, 256>& ByteLevelAlphabet() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int ByteLevelByte(char32_t cp) {
  if (cp < 256) {
    const bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE;
    return printable ? static_cast<int>(cp) : -1;
  }
  const auto& t = ByteLevelAlphabet();
  for (int b = 0; b < 256; ++b) {
    if (t[b] == cp) return b;
  }
  return -1;
}

absl::Status PreTokenizer::Parse(const json& spec, const std::string& file,
                                 const std::string& field, std::vector<Step>* steps) {
  if (spec.is_null()) return absl::OkStatus();
  auto type_it = spec.find("type");
  if (!spec.is_object() || type_it == spec.end() || !type_it->is_string()) {
    return FieldError(file, field + ".type", "is missing or not a string");
  }
  const std::string type = type_it->get<std::string>();
  auto get_bool = [&](const char* key, bool fallback) {
    auto it = spec.find(key);
    return it != spec.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  Step step;
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) {
      return FieldError(file, field + ".pretokenizers", "must be a list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      auto s = Parse((*it)[i], file, absl::StrCat(field, ".pretokenizers[", i, "]"), steps);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    auto rep = spec.find("replacement");
    if (rep == spec.end() || !rep->is_string() || rep->get<std::string>().empty()) {
      return FieldError(file, field + ".replacement", "must be a non-empty string");
    }
    step.text = rep->get<std::string>();
    step.flag = get_bool("split", true);
    auto scheme = spec.find("prepend_scheme");
    if (scheme != spec.end() && scheme->is_string()) {
      const std::string s = scheme->get<std::string>();
      if (s == "always") {
        step.prepend = Prepend::kAlways;
      } else if (s == "first") {
        step.prepend = Prepend::kFirst;
      } else if (s == "never") {
        step.prepend = Prepend::kNever;
      } else {
        return FieldError(file, field + ".prepend_scheme",
                          absl::StrCat("must be always, first or never, got \"", s, "\""));
      }
    } else {
      step.prepend = get_bool("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    }
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.flag = get_bool("add_prefix_space", true);
    step.use_regex = get_bool("use_regex", true);
  } else if (type == "Split") {
    auto pattern = spec.find("pattern");
    if (pattern == spec.end() || !pattern->is_object()) {
      return FieldError(file, field + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
    }
    if (pattern->contains("String") && (*pattern)["String"].is_string()) {
      step.kind = Step::Kind::kString;
      step.text = (*pattern)["String"].get<std::string>();
      if (step.text.empty()) return FieldError(file, field + ".pattern.String", "is empty");
    } else if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      step.kind = Step::Kind::kRegex;
      const std::string re = (*pattern)["Regex"].get<std::string>();
      if (re == kGpt2Regex) {
        step.regex = SplitRegex::kGpt2;
      } else if (re == kLlama3Regex) {
        step.regex = SplitRegex::kLlama3;
      } else if (re == kQwen2Regex) {
        step.regex = SplitRegex::kQwen2;
      } else {
        return absl::UnimplementedError(absl::StrCat(
            file, ": field '", field, ".pattern.Regex' = \"", re,
            "\" is not supported (known: the GPT-2, Llama-3 and Qwen2 patterns)"));
      }
    } else {
      return FieldError(file, field + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
    }
    step.invert = get_bool("invert", false);
    auto behavior = spec.find("behavior");
    const std::string b = behavior != spec.end() && behavior->is_string()
                              ? behavior->get<std::string>()
                              : std::string();
    if (b == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (b == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (b == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return FieldError(file, field + ".behavior",
                        absl::StrCat("must be one of Removed, Isolated, MergedWithPrevious, "
                                     "MergedWithNext, Contiguous; got ",
                                     behavior == spec.end() ? "nothing" : JsonExcerpt(*behavior)));
    }
  } else if (type == "Digits") {
    step.kind = Step::Kind::kDigits;
    step.flag = get_bool("individual_digits", false);
  } else {
    return absl::UnimplementedError(
        absl::StrCat(file, ": field '", field, ".type' = \"", type, "\" is not supported"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const json& spec,
                                                                     const std::string& file) {
  auto p = std::make_unique<PreTokenizer>();
  if (auto s = Parse(spec, file, "pre_tokenizer", &p->steps_); !s.ok()) return s;
  return p;
}

void PreTokenizer::ApplyStep(const Step& step, const TextSplit& in, std::vector<TextSplit>* out) {
  switch (step.kind) {
    case Step::Kind::kMetaspace: {
      TextSplit s{ReplaceAll(in.text, " ", step.text), in.at_origin};
      const bool prepend = step.prepend == Prepend::kAlways ||
                           (step.prepend == Prepend::kFirst && in.at_origin);
      if (prepend && !s.text.empty() && s.text.compare(0, step.text.size(), step.text) != 0) {
        s.text.insert(0, step.text);
      }
      if (!step.flag) {
        if (!s.text.empty()) out->push_back(std::move(s));
        return;
      }
      std::vector<char32_t> rep;
      std::vector<uint32_t> unused;
      DecodeUtf8(step.text, &rep, &unused);
      auto is = [](char32_t c, char32_t r) { return c == r; };
      SplitWith(s, CharMatches(s.text, is, rep[0]), Behavior::kMergedWithNext, false, out);
      return;
    }
    case Step::Kind::kByteLevel: {
      TextSplit s = in;
      if (step.flag && !s.text.empty() && s.text[0] != ' ') s.text.insert(s.text.begin(), ' ');
      std::vector<TextSplit> pieces;
      if (step.use_regex) {
        std::vector<std::pair<size_t, size_t>> matches;
        FindRegexMatches(SplitRegex::kGpt2, s.text, &matches);
        SplitWith(s, matches, Behavior::kIsolated, false, &pieces);
      } else if (!s.text.empty()) {
        pieces.push_back(std::move(s));
      }
      for (TextSplit& p : pieces) {
        p.text = ByteLevelEncode(p.text);
        out->push_back(std::move(p));
      }
      return;
    }
    case Step::Kind::kRegex: {
      std::vector<std::pair<size_t, size_t>> matches;
      FindRegexMatches(step.regex, in.text, &matches);
      SplitWith(in, matches, step.behavior, step.invert, out);
      return;
    }
    case Step::Kind::kString: {
      std::vector<std::pair<size_t, size_t>> matches;
      size_t pos = 0;
      while (true) {
        const size_t hit = in.text.find(step.text, pos);
        if (hit == std::string::npos) break;
        matches.push_back({hit, hit + step.text.size()});
        pos = hit + step.text.size();
      }
      SplitWith(in, matches, step.behavior, step.invert, out);
      return;
    }
    case Step::Kind::kDigits: {
      auto numeric = [](char32_t c, char32_t) { return IsNumber(c); };
      SplitWith(in, CharMatches(in.text, numeric, 0),
                step.flag ? Behavior::kIsolated : Behavior::kContiguous, false, out);
      return;
    }
  }
}

void PreTokenizer::Apply(std::vector<TextSplit>* splits) const {
  for (const Step& step : steps_) {
    std::vector<TextSplit> next;
    for (const TextSplit& s : *splits) ApplyStep(step, s, &next);
    splits->swap(next);
  }
}

}  // namespace treespec
