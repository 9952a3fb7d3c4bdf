// Template text → tokens, following Jinja's lexer with trim_blocks and
// lstrip_blocks on: `{%-`/`-%}` strip all whitespace on that side, `{%+`/`+%}`
// turn lstrip/trim off for that tag, a block or comment tag alone on its line
// (after spaces only) loses that indentation, and one newline after `%}` or `#}`
// is dropped.
#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"
#include "core/tokenizer/utf8.h"

namespace treespec::chat_template_internal {

std::string Source::Where(size_t pos) const {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, " col ", pos - line_start + 1);
}

absl::Status Source::Error(size_t pos, absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat("chat template ", Where(pos), ": ", message));
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a literal's body, as Jinja applies it.
std::string DecodeEscapes(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    char c = s[++i];
    switch (c) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case 'a': out.push_back('\a'); break;
      case '0': out.push_back('\0'); break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case '\n': break;
      case 'x': case 'u': case 'U': {
        size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + n < s.size();
        for (size_t k = 1; ok && k <= n; ++k) {
          int h = HexValue(s[i + k]);
          if (h < 0) ok = false; else cp = cp * 16 + h;
        }
        if (ok && cp <= 0x10FFFF) {
          AppendUtf8(cp, &out);
          i += n;
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
        break;
      }
      default: out.push_back('\\'); out.push_back(c);
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const Source& source) : src_(source), s_(source.text) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t tag = FindTag(pos_);
      std::string text(s_.substr(pos_, tag - pos_));
      if (tag == s_.size()) {
        Emit(TokKind::kText, std::move(text), pos_);
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char mod = tag + 2 < s_.size() ? s_[tag + 2] : 0;
      if (mod == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_space = true;
          for (size_t i = l_pos; i < text.size(); ++i) all_space &= IsSpace(text[i]);
          if (all_space) text.resize(l_pos);
        }
      }
      Emit(TokKind::kText, std::move(text), pos_);
      pos_ = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = s_.find("#}", pos_);
        if (end == std::string::npos) return src_.Error(tag, "unclosed comment '{#'");
        bool strip = end > pos_ && s_[end - 1] == '-';
        bool keep = end > pos_ && s_[end - 1] == '+';
        pos_ = end + 2;
        line_starting = AfterTagEnd(strip, keep, /*trim=*/true);
        continue;
      }
      bool block = kind == '%';
      Emit(block ? TokKind::kBlockBegin : TokKind::kVarBegin, "", tag);
      auto end = LexTag(block, tag);
      if (!end.ok()) return end.status();
      line_starting = *end;
    }
    Emit(TokKind::kEof, "", s_.size());
    return tokens_;
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  void Emit(TokKind kind, std::string text, size_t pos) {
    if (kind == TokKind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), pos});
  }

  // Whitespace handling after a tag end at pos_; returns whether the consumed
  // text ended in a newline (Jinja's line_starting).
  bool AfterTagEnd(bool strip, bool keep, bool trim) {
    if (strip) {
      size_t start = pos_;
      while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
      return pos_ > start && s_[pos_ - 1] == '\n';
    }
    if (trim && !keep && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      return true;
    }
    return false;
  }

  // Lexes expression tokens up to the tag's end; returns line_starting.
  absl::StatusOr<bool> LexTag(bool block, size_t tag_pos) {
    int depth = 0;
    const char end_char = block ? '%' : '}';
    while (true) {
      while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) {
        return src_.Error(tag_pos, block ? "unclosed tag '{%'" : "unclosed expression '{{'");
      }
      if (depth == 0) {
        for (char mod : {'-', '+', '\0'}) {
          size_t p = pos_ + (mod ? 1 : 0);
          if ((mod == 0 || s_[pos_] == mod) && p + 1 < s_.size() && s_[p] == end_char &&
              s_[p + 1] == '}') {
            if (mod == '+' && !block) break;
            Emit(block ? TokKind::kBlockEnd : TokKind::kVarEnd, "", pos_);
            pos_ = p + 2;
            return AfterTagEnd(mod == '-', mod == '+', block);
          }
        }
      }
      size_t start = pos_;
      char c = s_[pos_];
      if (IsNameStart(c)) {
        while (pos_ < s_.size() && IsNameChar(s_[pos_])) ++pos_;
        Emit(TokKind::kName, std::string(s_.substr(start, pos_ - start)), start);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        bool is_float = false;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' &&
            std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
          size_t p = pos_ + 1;
          if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
          if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
            is_float = true;
            pos_ = p;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
          }
        }
        Emit(is_float ? TokKind::kFloat : TokKind::kInt, std::string(s_.substr(start, pos_ - start)),
             start);
      } else if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s_.size() && s_[p] != c) p += s_[p] == '\\' ? 2 : 1;
        if (p >= s_.size()) return src_.Error(start, "unterminated string literal");
        Emit(TokKind::kString, DecodeEscapes(s_.substr(pos_ + 1, p - pos_ - 1)), start);
        pos_ = p + 1;
      } else {
        static constexpr absl::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (absl::string_view two : kTwo) {
          if (s_.substr(pos_, 2) == two) op = std::string(two);
        }
        if (op.size() == 1 && absl::string_view("+-*/%~<>=()[]{}.,:|!").find(c) ==
                                  absl::string_view::npos) {
          return src_.Error(start, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        if (op == "!") return src_.Error(start, "unexpected character '!'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        pos_ += op.size();
        Emit(TokKind::kOp, std::move(op), start);
      }
    }
  }

  const Source& src_;
  absl::string_view s_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(const Source& source) { return Lexer(source).Run(); }

}  // namespace treespec::chat_template_internal
