// Internals of the chat-template parser: the token cursor shared by the
// statement parser (chat_template_parser.cc) and the expression parser
// (chat_template_expr_parser.cc). Not thread-safe; one per parse.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"

namespace treespec::chat_template_internal {

#define CT_ASSIGN_OR_RETURN(lhs, expr)          \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = std::move(*lhs##_or)

using ExprPtr = std::unique_ptr<Expr>;

class TokenCursor {
 public:
  TokenCursor(const Source& source, const std::vector<Token>& tokens, int max_nesting,
              int max_expression_height)
      : src_(source), toks_(tokens), max_nesting_(max_nesting),
        max_height_(max_expression_height) {}

  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  bool IsOp(absl::string_view op) const { return Cur().kind == TokKind::kOp && Cur().text == op; }
  bool IsName(absl::string_view n) const { return Cur().kind == TokKind::kName && Cur().text == n; }
  absl::Status Err(absl::string_view what) const {
    const Token& t = Cur();
    std::string got = t.kind == TokKind::kEof        ? "end of template"
                      : t.kind == TokKind::kBlockEnd ? "'%}'"
                      : t.kind == TokKind::kVarEnd   ? "'}}'"
                      : t.kind == TokKind::kText     ? "template text"
                                                     : absl::StrCat("'", t.text, "'");
    return src_.Error(t.pos, absl::StrCat(what, ", got ", got));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!IsOp(op)) return Err(absl::StrCat("expected '", op, "'"));
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd(absl::string_view tag) {
    if (Cur().kind != TokKind::kBlockEnd) return Err(absl::StrCat("expected '%}' to end '", tag, "'"));
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName(absl::string_view what) {
    if (Cur().kind != TokKind::kName) return Err(absl::StrCat("expected ", what));
    return toks_[i_++].text;
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };
  absl::Status CheckDepth() const {
    if (depth_ > max_nesting_) {
      return src_.Error(Cur().pos, absl::StrCat("nesting deeper than ", max_nesting_));
    }
    return absl::OkStatus();
  }

  const Source& src_;
  const std::vector<Token>& toks_;
  int max_nesting_;
  int max_height_;
  size_t i_ = 0;
  int depth_ = 0;
};

// Expressions from the cursor's position, which they advance: the full grammar,
// the grammar without `a if c else b` (a for loop's iterable), and `a, b` tuples.
absl::StatusOr<ExprPtr> ParseExpressionAt(TokenCursor& cursor);
absl::StatusOr<ExprPtr> ParseOrAt(TokenCursor& cursor);
absl::StatusOr<ExprPtr> ParseTupleOrExpressionAt(TokenCursor& cursor);

}  // namespace treespec::chat_template_internal
