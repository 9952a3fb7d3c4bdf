// Expressions, with Jinja's grammar and operator precedence (loosest first):
// `a if c else b`, or, and, not, comparisons and in, + -, ~, * / // %, **,
// unary - +, then postfix .attr [i] [a:b] (call), | filter and `is` test.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_parser.h"

namespace treespec::chat_template_internal {
namespace {

// Parses on a copy of the cursor; the callers below copy the position back.
class ExprParser : public TokenCursor {
 public:
  explicit ExprParser(const TokenCursor& cursor) : TokenCursor(cursor) {}

  // `a, b` (a tuple, as a list) or one expression.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() {
    size_t pos = Cur().pos;
    CT_ASSIGN_OR_RETURN(first, ParseExpression());
    if (!IsOp(",")) return first;
    auto list = MakeExpr(ExprKind::kList, pos);
    list->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Cur().kind == TokKind::kBlockEnd || Cur().kind == TokKind::kVarEnd) break;
      CT_ASSIGN_OR_RETURN(e, ParseExpression());
      list->args.push_back(std::move(e));
    }
    if (auto s = Seal(*list); !s.ok()) return s;
    return list;
  }


  static ExprPtr MakeExpr(ExprKind kind, size_t pos, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    e->name = std::move(name);
    return e;
  }
  static ExprPtr Binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, size_t pos) {
    auto e = MakeExpr(kind, pos, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // Sets e.height from its (complete) children and refuses a tree taller than
  // max_height_. DepthGuard bounds recursion while parsing, but a left-leaning
  // chain (`a + a + ...`, `x.a.a...`, `x|f|f...`) is parsed by a loop and grows
  // one level per operator; rendering and destroying it recurse per level.
  absl::Status Seal(Expr& e) const {
    int below = 0;
    for (const ExprPtr& a : e.args) {
      if (a) below = std::max(below, a->height);
    }
    for (const auto& [key, value] : e.kwargs) {
      if (value) below = std::max(below, value->height);
    }
    e.height = below + 1;
    if (e.height > max_height_) {
      return src_.Error(e.pos, absl::StrCat("expression nested deeper than ", max_height_,
                                            " levels (operators, filters, attributes)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    DepthGuard guard(&depth_);
    if (auto s = CheckDepth(); !s.ok()) return s;
    size_t pos = Cur().pos;
    CT_ASSIGN_OR_RETURN(expr, ParseOr());
    while (IsName("if")) {
      ++i_;
      CT_ASSIGN_OR_RETURN(cond, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++i_;
        CT_ASSIGN_OR_RETURN(e, ParseExpression());
        otherwise = std::move(e);
      }
      auto c = MakeExpr(ExprKind::kCondition, pos);
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      if (auto s = Seal(*c); !s.ok()) return s;
      expr = std::move(c);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    CT_ASSIGN_OR_RETURN(left, ParseAnd());
    while (IsName("or")) {
      size_t pos = Cur().pos;
      ++i_;
      CT_ASSIGN_OR_RETURN(right, ParseAnd());
      left = Binary(ExprKind::kOr, "or", std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    CT_ASSIGN_OR_RETURN(left, ParseNot());
    while (IsName("and")) {
      size_t pos = Cur().pos;
      ++i_;
      CT_ASSIGN_OR_RETURN(right, ParseNot());
      left = Binary(ExprKind::kAnd, "and", std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      if (auto s = CheckDepth(); !s.ok()) return s;
      auto e = MakeExpr(ExprKind::kUnary, Cur().pos, "not");
      ++i_;
      CT_ASSIGN_OR_RETURN(arg, ParseNot());
      e->args.push_back(std::move(arg));
      if (auto s = Seal(*e); !s.ok()) return s;
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    CT_ASSIGN_OR_RETURN(left, ParseMath1());
    while (true) {
      size_t pos = Cur().pos;
      std::string op;
      if (Cur().kind == TokKind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().kind == TokKind::kName && Peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        return left;
      }
      CT_ASSIGN_OR_RETURN(right, ParseMath1());
      left = Binary(ExprKind::kBinary, op, std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    CT_ASSIGN_OR_RETURN(left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      size_t pos = Cur().pos;
      std::string op = toks_[i_++].text;
      CT_ASSIGN_OR_RETURN(right, ParseConcat());
      left = Binary(ExprKind::kBinary, op, std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    CT_ASSIGN_OR_RETURN(left, ParseMath2());
    while (IsOp("~")) {
      size_t pos = Cur().pos;
      ++i_;
      CT_ASSIGN_OR_RETURN(right, ParseMath2());
      left = Binary(ExprKind::kBinary, "~", std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    CT_ASSIGN_OR_RETURN(left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      size_t pos = Cur().pos;
      std::string op = toks_[i_++].text;
      CT_ASSIGN_OR_RETURN(right, ParsePow());
      left = Binary(ExprKind::kBinary, op, std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    CT_ASSIGN_OR_RETURN(left, ParseUnary(true));
    while (IsOp("**")) {
      size_t pos = Cur().pos;
      ++i_;
      CT_ASSIGN_OR_RETURN(right, ParseUnary(true));
      left = Binary(ExprKind::kBinary, "**", std::move(left), std::move(right), pos);
      if (auto s = Seal(*left); !s.ok()) return s;
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    if (auto s = CheckDepth(); !s.ok()) return s;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(ExprKind::kUnary, Cur().pos, Cur().text);
      ++i_;
      CT_ASSIGN_OR_RETURN(arg, ParseUnary(false));
      node->args.push_back(std::move(arg));
      if (auto s = Seal(*node); !s.ok()) return s;
    } else {
      CT_ASSIGN_OR_RETURN(primary, ParsePrimary());
      node = std::move(primary);
    }
    CT_ASSIGN_OR_RETURN(post, ParsePostfix(std::move(node)));
    if (!with_filter) return post;
    return ParseFilterExpr(std::move(post));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    size_t pos = t.pos;
    switch (t.kind) {
      case TokKind::kName: {
        ++i_;
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") e->literal = true;
        else if (t.text == "false" || t.text == "False") e->literal = false;
        else if (t.text == "none" || t.text == "None") e->literal = nullptr;
        else { e->kind = ExprKind::kName; e->name = t.text; }
        return e;
      }
      case TokKind::kString: {
        std::string s;
        while (Cur().kind == TokKind::kString) s += toks_[i_++].text;
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        e->literal = std::move(s);
        return e;
      }
      case TokKind::kInt: {
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        int64_t v = 0;
        if (!absl::SimpleAtoi(t.text, &v)) return src_.Error(pos, absl::StrCat("integer literal ", t.text, " out of range"));
        e->literal = v;
        ++i_;
        return e;
      }
      case TokKind::kFloat: {
        auto e = MakeExpr(ExprKind::kLiteral, pos);
        double v = 0;
        if (!absl::SimpleAtod(t.text, &v)) return src_.Error(pos, absl::StrCat("bad float literal ", t.text));
        e->literal = v;
        ++i_;
        return e;
      }
      case TokKind::kOp:
        if (t.text == "(") {
          ++i_;
          if (IsOp(")")) {
            ++i_;
            return MakeExpr(ExprKind::kList, pos);
          }
          CT_ASSIGN_OR_RETURN(e, ParseTupleOrExpression());
          if (auto s = ExpectOp(")"); !s.ok()) return s;
          return e;
        }
        if (t.text == "[" || t.text == "{") {
          bool dict = t.text == "{";
          ++i_;
          auto e = MakeExpr(dict ? ExprKind::kDict : ExprKind::kList, pos);
          std::string close = dict ? "}" : "]";
          while (!IsOp(close)) {
            if (!e->args.empty()) {
              if (auto s = ExpectOp(","); !s.ok()) return s;
              if (IsOp(close)) break;
            }
            CT_ASSIGN_OR_RETURN(item, ParseExpression());
            e->args.push_back(std::move(item));
            if (dict) {
              if (auto s = ExpectOp(":"); !s.ok()) return s;
              CT_ASSIGN_OR_RETURN(value, ParseExpression());
              e->args.push_back(std::move(value));
            }
          }
          ++i_;
          if (auto s = Seal(*e); !s.ok()) return s;
          return e;
        }
        break;
      default:
        break;
    }
    return Err("expected an expression");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      size_t pos = Cur().pos;
      if (IsOp(".")) {
        ++i_;
        if (Cur().kind == TokKind::kInt) {
          auto item = MakeExpr(ExprKind::kItem, pos);
          auto index = MakeExpr(ExprKind::kLiteral, Cur().pos);
          int64_t v = 0;
          if (!absl::SimpleAtoi(Cur().text, &v)) return Err("bad index");
          index->literal = v;
          ++i_;
          item->args.push_back(std::move(node));
          item->args.push_back(std::move(index));
          if (auto s = Seal(*item); !s.ok()) return s;
          node = std::move(item);
          continue;
        }
        CT_ASSIGN_OR_RETURN(name, ExpectName("an attribute name after '.'"));
        auto attr = MakeExpr(ExprKind::kAttr, pos, name);
        attr->args.push_back(std::move(node));
        if (auto s = Seal(*attr); !s.ok()) return s;
        node = std::move(attr);
      } else if (IsOp("[")) {
        ++i_;
        CT_ASSIGN_OR_RETURN(sub, ParseSubscript(std::move(node), pos));
        node = std::move(sub);
      } else if (IsOp("(")) {
        CT_ASSIGN_OR_RETURN(call, ParseCall(std::move(node), pos));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, size_t pos) {
    ExprPtr parts[3];
    int num_colons = 0;
    for (int k = 0; k < 3; ++k) {
      if (!IsOp(":") && !IsOp("]")) {
        CT_ASSIGN_OR_RETURN(e, ParseExpression());
        parts[k] = std::move(e);
      }
      if (k < 2 && IsOp(":")) {
        ++i_;
        ++num_colons;
      } else {
        break;
      }
    }
    if (auto s = ExpectOp("]"); !s.ok()) return s;
    if (num_colons == 0) {
      if (!parts[0]) return src_.Error(pos, "empty subscript '[]'");
      ExprPtr item = Binary(ExprKind::kItem, "", std::move(node), std::move(parts[0]), pos);
      if (auto s = Seal(*item); !s.ok()) return s;
      return item;
    }
    auto slice = MakeExpr(ExprKind::kSlice, pos);
    slice->args.push_back(std::move(node));
    for (auto& p : parts) slice->args.push_back(std::move(p));
    if (auto s = Seal(*slice); !s.ok()) return s;
    return slice;
  }

  // Arguments `(a, b, k=v)` appended to `call`.
  absl::Status ParseArgs(Expr* call) {
    if (auto s = ExpectOp("("); !s.ok()) return s;
    for (bool first = true; !IsOp(")"); first = false) {
      if (!first) {
        if (auto s = ExpectOp(","); !s.ok()) return s;
        if (IsOp(")")) break;
      }
      if (Cur().kind == TokKind::kName && Peek().kind == TokKind::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        i_ += 2;
        auto value = ParseExpression();
        if (!value.ok()) return value.status();
        call->kwargs.emplace_back(std::move(key), std::move(*value));
      } else {
        if (!call->kwargs.empty()) return Err("positional argument after a keyword argument");
        auto value = ParseExpression();
        if (!value.ok()) return value.status();
        call->args.push_back(std::move(*value));
      }
    }
    ++i_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee, size_t /*pos*/) {
    auto call = MakeExpr(ExprKind::kCall, callee->pos);
    call->args.push_back(std::move(callee));
    if (auto s = ParseArgs(call.get()); !s.ok()) return s;
    if (auto s = Seal(*call); !s.ok()) return s;
    return call;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      size_t pos = Cur().pos;
      if (IsOp("|")) {
        ++i_;
        CT_ASSIGN_OR_RETURN(name, ExpectName("a filter name after '|'"));
        auto f = MakeExpr(ExprKind::kFilter, pos, name);
        f->args.push_back(std::move(node));
        if (IsOp("(")) {
          if (auto s = ParseArgs(f.get()); !s.ok()) return s;
        }
        if (auto s = Seal(*f); !s.ok()) return s;
        node = std::move(f);
      } else if (IsName("is")) {
        ++i_;
        auto t = MakeExpr(ExprKind::kTest, pos);
        if (IsName("not")) {
          t->negate = true;
          ++i_;
        }
        CT_ASSIGN_OR_RETURN(name, ExpectName("a test name after 'is'"));
        t->name = name;
        t->args.push_back(std::move(node));
        if (IsOp("(")) {
          if (auto s = ParseArgs(t.get()); !s.ok()) return s;
        } else if ((Cur().kind == TokKind::kName || Cur().kind == TokKind::kString ||
                    Cur().kind == TokKind::kInt || Cur().kind == TokKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("is") &&
                   !IsName("if")) {
          CT_ASSIGN_OR_RETURN(arg, ParsePrimary());
          CT_ASSIGN_OR_RETURN(post, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(post));
        }
        if (auto s = Seal(*t); !s.ok()) return s;
        node = std::move(t);
      } else if (IsOp("(")) {
        CT_ASSIGN_OR_RETURN(call, ParseCall(std::move(node), pos));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }
};

template <typename F>
absl::StatusOr<ExprPtr> Run(TokenCursor& cursor, F parse) {
  ExprParser parser(cursor);
  absl::StatusOr<ExprPtr> result = parse(parser);
  cursor.i_ = parser.i_;
  return result;
}

}  // namespace

absl::StatusOr<ExprPtr> ParseExpressionAt(TokenCursor& cursor) {
  return Run(cursor, [](ExprParser& p) { return p.ParseExpression(); });
}
absl::StatusOr<ExprPtr> ParseOrAt(TokenCursor& cursor) {
  return Run(cursor, [](ExprParser& p) { return p.ParseOr(); });
}
absl::StatusOr<ExprPtr> ParseTupleOrExpressionAt(TokenCursor& cursor) {
  return Run(cursor, [](ExprParser& p) { return p.ParseTupleOrExpression(); });
}

}  // namespace treespec::chat_template_internal
