// Renders a parsed template: statements write into one output string, expressions
// evaluate to values with Python/Jinja semantics. Scoping follows Jinja: each loop
// iteration has its own scope (a `set` inside a loop is gone after it; namespace()
// objects carry state out), `if` has none.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"

namespace treespec::chat_template_internal {
namespace {

class Renderer {
 public:
  Renderer(const Program& program, const Value& context)
      : prog_(program), limits_{program.limits.max_output_bytes} {
    scopes_.emplace_back();
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = it.value();
    }
    scopes_.emplace_back();
  }

  absl::StatusOr<std::string> Run() {
    if (auto s = ExecBody(prog_.body); !s.ok()) return s;
    return out_;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Fail(size_t pos, absl::string_view message) const {
    return prog_.source.Error(pos, message);
  }
  absl::Status Wrap(size_t pos, const absl::Status& s) const {
    return s.ok() ? s : Fail(pos, s.message());
  }

  absl::Status Append(size_t pos, absl::string_view text) {
    if (static_cast<int64_t>(out_.size() + text.size()) > prog_.limits.max_output_bytes) {
      return Fail(pos, absl::StrCat("output longer than ", prog_.limits.max_output_bytes, " bytes"));
    }
    out_.append(text.data(), text.size());
    return absl::OkStatus();
  }

  // The value budget of a `set` (ChatTemplateLimits::max_value_depth and
  // max_value_elements).
  absl::Status CheckStored(size_t pos, const Value& v) const {
    int64_t elements = 0;
    const int depth = Measure(v, 1, &elements);
    if (depth > prog_.limits.max_value_depth) {
      return Fail(pos, absl::StrCat("value nested deeper than ", prog_.limits.max_value_depth,
                                    " levels"));
    }
    if (elements > prog_.limits.max_value_elements) {
      return Fail(pos, absl::StrCat("value with more than ", prog_.limits.max_value_elements,
                                    " elements"));
    }
    return absl::OkStatus();
  }
  // Nesting levels of `v` (a scalar is 1); stops early once over a limit, so
  // a deep value from the request's context recurses at most
  // max_value_depth + 1 levels.
  int Measure(const Value& v, int level, int64_t* elements) const {
    ++*elements;
    if (!v.is_structured() || level > prog_.limits.max_value_depth) return level;
    int deepest = level;
    for (const Value& child : v) {
      if (deepest > prog_.limits.max_value_depth || *elements > prog_.limits.max_value_elements) {
        break;
      }
      deepest = std::max(deepest, Measure(child, level + 1, elements));
    }
    return deepest;
  }

  absl::Status ExecBody(const std::vector<Node>& body) {
    for (const Node& node : body) {
      if (auto s = Exec(node); !s.ok()) return s;
      if (flow_ != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Exec(const Node& node) {
    switch (node.kind) {
      case NodeKind::kText:
        return Append(node.pos, node.text);
      case NodeKind::kOutput: {
        auto v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        return Append(node.pos, ToStr(*v));
      }
      case NodeKind::kIf:
        for (const Node::Branch& branch : node.branches) {
          bool take = true;
          if (branch.cond) {
            auto c = Eval(*branch.cond);
            if (!c.ok()) return c.status();
            take = Truthy(*c);
          }
          if (take) return ExecBody(branch.body);
        }
        return absl::OkStatus();
      case NodeKind::kFor:
        return ExecFor(node);
      case NodeKind::kSet: {
        auto v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (auto s = CheckStored(node.pos, *v); !s.ok()) return s;
        scopes_.back()[node.targets[0]] = std::move(*v);
        return absl::OkStatus();
      }
      case NodeKind::kSetAttr: {
        auto v = Eval(*node.expr);
        if (!v.ok()) return v.status();
        if (auto s = CheckStored(node.pos, *v); !s.ok()) return s;
        Value* target = Lookup(node.targets[0]);
        if (target == nullptr || !target->is_object()) {
          return Fail(node.pos, absl::StrCat("cannot assign attribute '", node.targets[1],
                                             "' on '", node.targets[0],
                                             "': not a namespace object"));
        }
        (*target)[node.targets[1]] = std::move(*v);
        return absl::OkStatus();
      }
      case NodeKind::kBreak:
        flow_ = Flow::kBreak;
        return absl::OkStatus();
      case NodeKind::kContinue:
        flow_ = Flow::kContinue;
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Value>> Iterate(size_t pos, const Value& v) const {
    std::vector<Value> items;
    if (IsUndefined(v)) return items;
    if (v.is_array()) {
      items.assign(v.begin(), v.end());
    } else if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(it.key());
    } else if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      std::vector<size_t> off = CodePointOffsets(s);
      for (size_t i = 0; i + 1 < off.size(); ++i) items.emplace_back(s.substr(off[i], off[i + 1] - off[i]));
    } else {
      return Fail(pos, absl::StrCat("'", TypeName(v), "' object is not iterable"));
    }
    return items;
  }

  absl::Status Bind(size_t pos, const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = item;
      return absl::OkStatus();
    }
    if (!item.is_array() || item.size() != targets.size()) {
      return Fail(pos, absl::StrCat("cannot unpack ", TypeName(item), " into ", targets.size(),
                                    " loop variables"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = item[i];
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Node& node) {
    auto iterable = Eval(*node.expr);
    if (!iterable.ok()) return iterable.status();
    auto all = Iterate(node.expr->pos, *iterable);
    if (!all.ok()) return all.status();
    std::vector<Value> items;
    for (Value& item : *all) {
      if (node.filter) {
        scopes_.emplace_back();
        absl::Status s = Bind(node.pos, node.targets, item);
        absl::StatusOr<Value> keep = s.ok() ? Eval(*node.filter) : absl::StatusOr<Value>(s);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (!Truthy(*keep)) continue;
      }
      items.push_back(std::move(item));
    }
    const int64_t n = items.size();
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > prog_.limits.max_loop_iterations) {
        return Fail(node.pos, absl::StrCat("more than ", prog_.limits.max_loop_iterations,
                                           " loop iterations"));
      }
      scopes_.emplace_back();
      Value loop = Value::object();
      loop["index0"] = i;
      loop["index"] = i + 1;
      loop["revindex0"] = n - i - 1;
      loop["revindex"] = n - i;
      loop["first"] = i == 0;
      loop["last"] = i == n - 1;
      loop["length"] = n;
      loop["previtem"] = i > 0 ? items[i - 1] : Undefined();
      loop["nextitem"] = i + 1 < n ? items[i + 1] : Undefined();
      scopes_.back()["loop"] = std::move(loop);
      absl::Status s = Bind(node.pos, node.targets, items[i]);
      if (s.ok()) s = ExecBody(node.branches[0].body);
      scopes_.pop_back();
      if (!s.ok()) return s;
      Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && node.branches.size() > 1) return ExecBody(node.branches[1].body);
    return absl::OkStatus();
  }

  Value* Lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return &found->second;
    }
    return nullptr;
  }

  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e, size_t first) {
    std::vector<Value> out;
    for (size_t i = first; i < e.args.size(); ++i) {
      auto v = Eval(*e.args[i]);
      if (!v.ok()) return v.status();
      out.push_back(std::move(*v));
    }
    return out;
  }

  absl::StatusOr<Kwargs> EvalKwargs(const Expr& e) {
    Kwargs out;
    for (const auto& [key, expr] : e.kwargs) {
      auto v = Eval(*expr);
      if (!v.ok()) return v.status();
      out.emplace_back(key, std::move(*v));
    }
    return out;
  }

  static std::string Describe(const Expr& e) {
    if (e.kind == ExprKind::kName) return absl::StrCat("'", e.name, "'");
    if (e.kind == ExprKind::kAttr) return absl::StrCat("attribute '", e.name, "'");
    return "value";
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName: {
        Value* v = Lookup(e.name);
        return v ? *v : Undefined();
      }
      case ExprKind::kList: {
        auto items = EvalArgs(e, 0);
        if (!items.ok()) return items.status();
        Value list = Value::array();
        for (Value& v : *items) list.push_back(std::move(v));
        return list;
      }
      case ExprKind::kDict: {
        auto items = EvalArgs(e, 0);
        if (!items.ok()) return items.status();
        Value dict = Value::object();
        for (size_t i = 0; i + 1 < items->size(); i += 2) {
          const Value& key = (*items)[i];
          if (!key.is_string()) return Fail(e.args[i]->pos, "dict keys must be strings");
          dict[key.get<std::string>()] = std::move((*items)[i + 1]);
        }
        return dict;
      }
      case ExprKind::kAttr: {
        auto obj = Eval(*e.args[0]);
        if (!obj.ok()) return obj.status();
        if (IsUndefined(*obj)) {
          return Fail(e.pos, absl::StrCat(Describe(*e.args[0]), " is undefined (reading '.",
                                          e.name, "')"));
        }
        if (obj->is_object()) {
          auto it = obj->find(e.name);
          if (it != obj->end()) return *it;
        }
        return Undefined();
      }
      case ExprKind::kItem:
        return EvalItem(e);
      case ExprKind::kSlice:
        return EvalSlice(e);
      case ExprKind::kCall:
        return EvalCall(e);
      case ExprKind::kFilter: {
        auto args = EvalArgs(e, 0);
        if (!args.ok()) return args.status();
        auto kwargs = EvalKwargs(e);
        if (!kwargs.ok()) return kwargs.status();
        Value input = std::move((*args)[0]);
        args->erase(args->begin());
        auto r = CallFilter(e.name, input, *args, *kwargs, limits_);
        if (!r.ok()) return Wrap(e.pos, r.status());
        return r;
      }
      case ExprKind::kTest: {
        auto args = EvalArgs(e, 0);
        if (!args.ok()) return args.status();
        Value input = std::move((*args)[0]);
        args->erase(args->begin());
        auto r = CallTest(e.name, input, *args);
        if (!r.ok()) return Wrap(e.pos, r.status());
        return Value(*r != e.negate);
      }
      case ExprKind::kUnary: {
        auto v = Eval(*e.args[0]);
        if (!v.ok()) return v.status();
        if (e.name == "not") return Value(!Truthy(*v));
        if (!IsNumber(*v)) {
          return Fail(e.pos, absl::StrCat("bad operand type for unary ", e.name, ": '",
                                          TypeName(*v), "'"));
        }
        if (e.name == "+") return v->is_boolean() ? Value(v->get<bool>() ? 1 : 0) : *v;
        if (v->is_number_float()) return Value(-v->get<double>());
        int64_t x = v->is_boolean() ? v->get<bool>() : v->get<int64_t>();
        if (x == INT64_MIN) return Fail(e.pos, "integer overflow");
        return Value(-x);
      }
      case ExprKind::kAnd: {
        auto a = Eval(*e.args[0]);
        if (!a.ok() || !Truthy(*a)) return a;
        return Eval(*e.args[1]);
      }
      case ExprKind::kOr: {
        auto a = Eval(*e.args[0]);
        if (!a.ok() || Truthy(*a)) return a;
        return Eval(*e.args[1]);
      }
      case ExprKind::kCondition: {
        auto c = Eval(*e.args[1]);
        if (!c.ok()) return c.status();
        if (Truthy(*c)) return Eval(*e.args[0]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Undefined();
      }
      case ExprKind::kBinary:
        return EvalBinary(e);
    }
    return Fail(e.pos, "unknown expression");
  }

  absl::StatusOr<Value> EvalItem(const Expr& e) {
    auto obj = Eval(*e.args[0]);
    if (!obj.ok()) return obj.status();
    auto key = Eval(*e.args[1]);
    if (!key.ok()) return key.status();
    if (IsUndefined(*obj)) {
      return Fail(e.pos, absl::StrCat(Describe(*e.args[0]), " is undefined (reading [",
                                      Repr(*key), "])"));
    }
    if (obj->is_object()) {
      if (!key->is_string()) return Undefined();
      auto it = obj->find(key->get<std::string>());
      return it != obj->end() ? *it : Undefined();
    }
    if ((obj->is_array() || obj->is_string()) && key->is_number_integer()) {
      int64_t i = key->get<int64_t>();
      if (obj->is_array()) {
        int64_t n = obj->size();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Undefined();
        return (*obj)[i];
      }
      const std::string& s = obj->get_ref<const std::string&>();
      std::vector<size_t> off = CodePointOffsets(s);
      int64_t n = off.size() - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined();
      return Value(s.substr(off[i], off[i + 1] - off[i]));
    }
    return Undefined();
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e) {
    auto obj = Eval(*e.args[0]);
    if (!obj.ok()) return obj.status();
    int64_t parts[3];
    bool given[3];
    for (int k = 0; k < 3; ++k) {
      given[k] = false;
      if (!e.args[k + 1]) continue;
      auto v = Eval(*e.args[k + 1]);
      if (!v.ok()) return v.status();
      if (v->is_null()) continue;
      if (!v->is_number_integer()) {
        return Fail(e.pos, absl::StrCat("slice indices must be integers or none, got '",
                                        TypeName(*v), "'"));
      }
      parts[k] = v->get<int64_t>();
      given[k] = true;
    }
    int64_t step = given[2] ? parts[2] : 1;
    if (step == 0) return Fail(e.pos, "slice step cannot be zero");
    std::vector<size_t> off;
    int64_t n;
    if (obj->is_array()) {
      n = obj->size();
    } else if (obj->is_string()) {
      off = CodePointOffsets(obj->get_ref<const std::string&>());
      n = off.size() - 1;
    } else if (IsUndefined(*obj)) {
      return Fail(e.pos, absl::StrCat(Describe(*e.args[0]), " is undefined (sliced)"));
    } else {
      // Jinja compiles slices to plain Python subscripts, which raise here.
      return Fail(e.pos, absl::StrCat("'", TypeName(*obj), "' object is not subscriptable by a slice"));
    }
    // Python's slice.indices().
    auto clamp = [&](int64_t v, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : n - 1);
    int64_t stop = clamp(parts[1], given[1], step > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
    if (obj->is_array()) {
      Value out = Value::array();
      for (int64_t i : idx) out.push_back((*obj)[i]);
      return out;
    }
    const std::string& s = obj->get_ref<const std::string&>();
    std::string out;
    for (int64_t i : idx) out.append(s, off[i], off[i + 1] - off[i]);
    return Value(std::move(out));
  }

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    const Expr& callee = *e.args[0];
    auto args = EvalArgs(e, 1);
    if (!args.ok()) return args.status();
    auto kwargs = EvalKwargs(e);
    if (!kwargs.ok()) return kwargs.status();
    if (callee.kind == ExprKind::kAttr) {
      auto obj = Eval(*callee.args[0]);
      if (!obj.ok()) return obj.status();
      if (IsUndefined(*obj)) {
        return Fail(e.pos, absl::StrCat(Describe(*callee.args[0]), " is undefined (calling '.",
                                        callee.name, "()')"));
      }
      auto r = CallMethod(*obj, callee.name, *args, *kwargs);
      if (!r.ok()) return Wrap(e.pos, r.status());
      return r;
    }
    if (callee.kind == ExprKind::kName && Lookup(callee.name) == nullptr) {
      if (callee.name == "raise_exception") {
        std::string message = args->empty() ? "" : ToStr((*args)[0]);
        return Fail(e.pos, absl::StrCat("raise_exception: ", message));
      }
      if (IsGlobalFunction(callee.name)) {
        auto r = CallGlobal(callee.name, *args, *kwargs, limits_);
        if (!r.ok()) return Wrap(e.pos, r.status());
        return r;
      }
      return Fail(e.pos, absl::StrCat("'", callee.name, "' is undefined (called as a function)"));
    }
    return Fail(e.pos, absl::StrCat(Describe(callee), " is not callable"));
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    auto a = Eval(*e.args[0]);
    if (!a.ok()) return a.status();
    auto b = Eval(*e.args[1]);
    if (!b.ok()) return b.status();
    auto r = ApplyBinary(e.name, *a, *b, Describe(*e.args[0]), Describe(*e.args[1]),
                         limits_.max_bytes);
    if (!r.ok()) return Wrap(e.pos, r.status());
    return r;
  }

  const Program& prog_;
  CallLimits limits_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  Flow flow_ = Flow::kNormal;
  int64_t iterations_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RenderProgram(const Program& program, const Value& context) {
  return Renderer(program, context).Run();
}

}  // namespace treespec::chat_template_internal
