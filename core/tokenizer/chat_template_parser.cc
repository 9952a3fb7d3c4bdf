// Statements: template text, {{ expressions }}, and the for / if / set / break
// / continue tags, each body parsed until its closing tag.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_parser.h"

namespace treespec::chat_template_internal {
namespace {

class Parser : public TokenCursor {
 public:
  using TokenCursor::TokenCursor;

  absl::StatusOr<std::vector<Node>> Run() {
    std::string end;
    CT_ASSIGN_OR_RETURN(body, ParseBody({}, &end));
    return body;
  }

 private:
  absl::StatusOr<ExprPtr> ParseExpression() { return ParseExpressionAt(*this); }
  absl::StatusOr<ExprPtr> ParseOr() { return ParseOrAt(*this); }
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() { return ParseTupleOrExpressionAt(*this); }

  // Parses nodes until a block tag whose name is in `ends` (left unconsumed
  // after the name; *end set to it) or the end of the template (ends empty).
  absl::StatusOr<std::vector<Node>> ParseBody(std::initializer_list<absl::string_view> ends,
                                              std::string* end) {
    DepthGuard guard(&depth_);
    if (auto s = CheckDepth(); !s.ok()) return s;
    std::vector<Node> body;
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokKind::kEof) {
        if (ends.size() != 0) {
          return src_.Error(t.pos, absl::StrCat("missing '{% ", *(ends.end() - 1), " %}'"));
        }
        return body;
      }
      if (t.kind == TokKind::kText) {
        body.push_back(MakeNode(NodeKind::kText, t.pos));
        body.back().text = t.text;
        ++i_;
      } else if (t.kind == TokKind::kVarBegin) {
        ++i_;
        Node n = MakeNode(NodeKind::kOutput, t.pos);
        CT_ASSIGN_OR_RETURN(e, ParseExpression());
        n.expr = std::move(e);
        if (Cur().kind != TokKind::kVarEnd) return Err("expected '}}'");
        ++i_;
        body.push_back(std::move(n));
      } else if (t.kind == TokKind::kBlockBegin) {
        ++i_;
        if (Cur().kind != TokKind::kName) return Err("expected a tag name");
        const std::string& tag = Cur().text;
        for (absl::string_view e : ends) {
          if (tag == e) {
            *end = tag;
            ++i_;
            return body;
          }
        }
        CT_ASSIGN_OR_RETURN(node, ParseStatement());
        body.push_back(std::move(node));
      } else {
        return Err("unexpected token");
      }
    }
  }

  absl::StatusOr<Node> ParseStatement() {
    const Token& t = Cur();
    size_t pos = t.pos;
    std::string tag = t.text;
    ++i_;
    if (tag == "for") return ParseFor(pos);
    if (tag == "if") return ParseIf(pos);
    if (tag == "set") return ParseSet(pos);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return src_.Error(pos, absl::StrCat("'", tag, "' outside a loop"));
      if (auto s = ExpectBlockEnd(tag); !s.ok()) return s;
      return MakeNode(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, pos);
    }
    return src_.Error(pos, absl::StrCat("unsupported or unknown tag '", tag, "'"));
  }

  absl::StatusOr<Node> ParseFor(size_t pos) {
    Node n = MakeNode(NodeKind::kFor, pos);
    do {
      CT_ASSIGN_OR_RETURN(name, ExpectName("a loop variable name"));
      n.targets.push_back(std::move(name));
    } while (IsOp(",") && (++i_, true));
    if (!IsName("in")) return Err("expected 'in'");
    ++i_;
    CT_ASSIGN_OR_RETURN(iter, ParseOr());
    n.expr = std::move(iter);
    if (IsName("if")) {
      ++i_;
      CT_ASSIGN_OR_RETURN(filter, ParseExpression());
      n.filter = std::move(filter);
    }
    if (IsName("recursive")) return Err("recursive loops are not supported");
    if (auto s = ExpectBlockEnd("for"); !s.ok()) return s;
    std::string end;
    ++loop_depth_;
    auto body = ParseBody({"else", "endfor"}, &end);
    --loop_depth_;
    if (!body.ok()) return body.status();
    n.branches.push_back(Node::Branch{nullptr, std::move(*body)});
    if (auto s = ExpectBlockEnd(end); !s.ok()) return s;
    if (end == "else") {
      CT_ASSIGN_OR_RETURN(else_body, ParseBody({"endfor"}, &end));
      n.branches.push_back(Node::Branch{nullptr, std::move(else_body)});
      if (auto s = ExpectBlockEnd(end); !s.ok()) return s;
    }
    return n;
  }

  absl::StatusOr<Node> ParseIf(size_t pos) {
    Node n = MakeNode(NodeKind::kIf, pos);
    std::string end = "if";
    while (true) {
      ExprPtr cond;
      if (end != "else") {
        CT_ASSIGN_OR_RETURN(c, ParseExpression());
        cond = std::move(c);
      }
      if (auto s = ExpectBlockEnd(end); !s.ok()) return s;
      bool was_else = end == "else";
      auto body = was_else ? ParseBody({"endif"}, &end) : ParseBody({"elif", "else", "endif"}, &end);
      if (!body.ok()) return body.status();
      n.branches.push_back(Node::Branch{std::move(cond), std::move(*body)});
      if (end == "endif") {
        if (auto s = ExpectBlockEnd(end); !s.ok()) return s;
        return n;
      }
    }
  }

  absl::StatusOr<Node> ParseSet(size_t pos) {
    CT_ASSIGN_OR_RETURN(name, ExpectName("a variable name after 'set'"));
    Node n = MakeNode(NodeKind::kSet, pos);
    n.targets.push_back(name);
    if (IsOp(".")) {
      ++i_;
      CT_ASSIGN_OR_RETURN(attr, ExpectName("an attribute name"));
      n.kind = NodeKind::kSetAttr;
      n.targets.push_back(attr);
    }
    if (Cur().kind == TokKind::kBlockEnd) return Err("set blocks are not supported; expected '='");
    if (auto s = ExpectOp("="); !s.ok()) return s;
    CT_ASSIGN_OR_RETURN(value, ParseTupleOrExpression());
    n.expr = std::move(value);
    if (auto s = ExpectBlockEnd("set"); !s.ok()) return s;
    return n;
  }

  static Node MakeNode(NodeKind kind, size_t pos) {
    Node n;
    n.kind = kind;
    n.pos = pos;
    return n;
  }

  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Node>> ParseTokens(const Source& source,
                                              const std::vector<Token>& tokens,
                                              int max_nesting, int max_expression_height) {
  return Parser(source, tokens, max_nesting, max_expression_height).Run();
}

}  // namespace treespec::chat_template_internal
