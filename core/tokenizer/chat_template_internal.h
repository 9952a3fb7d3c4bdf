// Internals of the chat-template engine (chat_template.h): tokens, syntax tree,
// value helpers. Values are nlohmann::ordered_json (key order kept, as Python
// dicts keep it); a `discarded` json stands for Jinja's Undefined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"

namespace treespec::chat_template_internal {

using Value = nlohmann::ordered_json;

inline Value Undefined() { return Value(Value::value_t::discarded); }
inline bool IsUndefined(const Value& v) { return v.is_discarded(); }

// ---- Lexer ----
enum class TokKind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString,
                     kInt, kFloat, kOp, kEof };

struct Token {
  TokKind kind;
  std::string text;  // text, name, decoded string literal, number spelling, operator
  size_t pos = 0;    // byte offset in the normalized source
};

struct Source {
  std::string text;  // newlines normalized, one trailing newline dropped
  // "line L col C" (1-based) of a byte offset.
  std::string Where(size_t pos) const;
  absl::Status Error(size_t pos, absl::string_view message) const;
};

absl::StatusOr<std::vector<Token>> Lex(const Source& source);

// ---- Syntax tree ----
enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // args
  kDict,       // args: key, value, key, value...
  kAttr,       // args[0] . name
  kItem,       // args[0] [ args[1] ]
  kSlice,      // args[0] [ args[1] : args[2] : args[3] ]; absent parts are null
  kCall,       // args[0] ( args[1..] , kwargs ); args[0] may be kAttr (a method)
  kFilter,     // name ( args[0] = input, args[1..], kwargs )
  kTest,       // args[0] is [not] name ( args[1..] ); negate
  kUnary,      // op args[0]: "-", "+", "not"
  kBinary,     // args[0] op args[1]: + - * / // % ** ~ == != < <= > >= in notin
  kAnd,        // args[0] and args[1]
  kOr,
  kCondition,  // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  size_t pos = 0;
  std::string name;  // name, attribute, operator, filter or test
  Value literal;
  bool negate = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  int height = 1;  // levels of this tree (a leaf is 1), at most max_expression_height
};

enum class NodeKind { kText, kOutput, kFor, kIf, kSet, kSetAttr, kBreak, kContinue };

struct Node {
  NodeKind kind;
  size_t pos = 0;
  std::string text;                  // kText
  std::vector<std::string> targets;  // kFor loop names; kSet name; kSetAttr {name, attr}
  std::unique_ptr<Expr> expr;        // kOutput value, kFor iterable, kSet value
  std::unique_ptr<Expr> filter;      // kFor `if` filter
  // kIf: one branch per if/elif (cond set) plus else (cond null). kFor: body, else.
  struct Branch {
    std::unique_ptr<Expr> cond;
    std::vector<Node> body;
  };
  std::vector<Branch> branches;
};

struct Program {
  Source source;
  std::vector<Node> body;
  ChatTemplateLimits limits;
};

// chat_template_eval.cc
absl::StatusOr<std::string> RenderProgram(const Program& program, const Value& context);

absl::StatusOr<std::vector<Node>> ParseTokens(const Source& source,
                                              const std::vector<Token>& tokens,
                                              int max_nesting, int max_expression_height);

// ---- Values (chat_template_value.cc) ----
bool Truthy(const Value& v);
// Python str(): strings as is, None, True, 1.5, ['a', 1], {'k': 'v'}; Undefined "".
std::string ToStr(const Value& v);
// Python repr() of a value.
std::string Repr(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=...).
absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys);
// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <; INVALID_ARGUMENT-free: returns false for unordered types, sets *ok.
bool Less(const Value& a, const Value& b, bool* ok);
const char* TypeName(const Value& v);
bool IsNumber(const Value& v);  // int, float or bool
double AsDouble(const Value& v);
// Code points of a UTF-8 string, as byte offsets: offsets[i] starts code point i,
// offsets.back() == s.size().
std::vector<size_t> CodePointOffsets(absl::string_view s);
// Python str.strip(chars); with chars empty, Unicode whitespace.
std::string Strip(absl::string_view s, bool left, bool right, const Value& chars);

}  // namespace treespec::chat_template_internal

namespace treespec::chat_template_internal {

// ---- Builtins (chat_template_builtins.cc) ----
// Errors are plain messages; the renderer adds the template position.
using Kwargs = std::vector<std::pair<std::string, Value>>;
struct CallLimits {
  int64_t max_bytes;  // largest string or list a builtin may build
};
absl::StatusOr<Value> CallFilter(const std::string& name, const Value& input,
                                 const std::vector<Value>& args, const Kwargs& kwargs,
                                 const CallLimits& limits);
absl::StatusOr<bool> CallTest(const std::string& name, const Value& input,
                              const std::vector<Value>& args);
// obj.name(args): str and dict methods.
absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name,
                                 const std::vector<Value>& args, const Kwargs& kwargs);
// a op b for the binary operators (chat_template_operators.cc); a_name / b_name
// describe the operands in "'x' is undefined" errors.
absl::StatusOr<Value> ApplyBinary(const std::string& op, const Value& a, const Value& b,
                                  const std::string& a_name, const std::string& b_name,
                                  int64_t max_bytes);
// Global functions other than raise_exception (which the renderer handles).
bool IsGlobalFunction(const std::string& name);
absl::StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                                 const Kwargs& kwargs, const CallLimits& limits);

}  // namespace treespec::chat_template_internal
