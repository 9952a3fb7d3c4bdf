// Binary operators of the chat-template subset with Python semantics: + - * /
// // % ** on numbers, + and * on strings and lists, ~, comparisons, in.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"

namespace treespec::chat_template_internal {
namespace {

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status CheckSize(int64_t max_bytes, size_t bytes) {
  if (static_cast<int64_t>(bytes) > max_bytes) {
    return Bad(absl::StrCat("value longer than ", max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Value> ApplyBinary(const std::string& op, const Value& a, const Value& b,
                                  const std::string& a_name, const std::string& b_name,
                                  int64_t max_bytes) {
  if (op == "~") {
    std::string s = ToStr(a) + ToStr(b);
    if (auto st = CheckSize(max_bytes, s.size()); !st.ok()) return st;
    return Value(std::move(s));
  }
  if (op == "==") return Value(Equal(a, b));
  if (op == "!=") return Value(!Equal(a, b));
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return Bad(absl::StrCat("'in <string>' requires string as left operand, not '",
                                        TypeName(a), "'"));
      }
      found = b.get_ref<const std::string&>().find(a.get_ref<const std::string&>()) !=
              std::string::npos;
    } else if (b.is_array()) {
      for (const Value& item : b) found = found || Equal(a, item);
    } else if (b.is_object()) {
      if (a.is_array() || a.is_object()) {
        return Bad(absl::StrCat("unhashable type: '", TypeName(a), "'"));
      }
      found = a.is_string() && b.contains(a.get<std::string>());
    } else if (!IsUndefined(b)) {
      return Bad(absl::StrCat("argument of type '", TypeName(b), "' is not iterable"));
    }
    return Value(found == (op == "in"));
  }
  if (IsUndefined(a) || IsUndefined(b)) {
    return Bad(absl::StrCat((IsUndefined(a) ? a_name : b_name),
                                    " is undefined (operand of '", op, "')"));
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    bool ok = true;
    bool r = op == "<"    ? Less(a, b, &ok)
             : op == ">"  ? Less(b, a, &ok)
             : op == "<=" ? !Less(b, a, &ok)
                          : !Less(a, b, &ok);
    if (!ok) {
      return Bad(absl::StrCat("'", op, "' not supported between '", TypeName(a),
                                      "' and '", TypeName(b), "'"));
    }
    return Value(r);
  }
  auto type_error = [&]() {
    return Bad(absl::StrCat("unsupported operand types for ", op, ": '", TypeName(a),
                                    "' and '", TypeName(b), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      std::string s = a.get<std::string>() + b.get<std::string>();
      if (auto st = CheckSize(max_bytes, s.size()); !st.ok()) return st;
      return Value(std::move(s));
    }
    if (a.is_array() && b.is_array()) {
      if (auto st = CheckSize(max_bytes, a.size() + b.size()); !st.ok()) return st;
      Value out = a;
      for (const Value& v : b) out.push_back(v);
      return out;
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_array() ? &a : b.is_string() || b.is_array() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && (count->is_number_integer() || count->is_boolean())) {
      int64_t k = count->is_boolean() ? count->get<bool>() : count->get<int64_t>();
      k = std::max<int64_t>(k, 0);
      size_t unit = seq->is_string() ? seq->get_ref<const std::string&>().size() : seq->size();
      if (unit > 0 && k > max_bytes / static_cast<int64_t>(unit)) {
        return CheckSize(max_bytes, max_bytes + 1);
      }
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < k; ++i) s += seq->get_ref<const std::string&>();
        return Value(std::move(s));
      }
      Value out = Value::array();
      for (int64_t i = 0; i < k; ++i) {
        for (const Value& v : *seq) out.push_back(v);
      }
      return out;
    }
  }
  if (op == "%" && a.is_string()) {
    // Python formats a string without conversions against a mapping as itself.
    if (b.is_object() && a.get_ref<const std::string&>().find('%') == std::string::npos) return a;
    return Bad("string formatting with '%' is not supported");
  }
  if (!IsNumber(a) || !IsNumber(b)) return type_error();
  bool ints = !a.is_number_float() && !b.is_number_float();
  if (ints && op != "/") {
    int64_t x = a.is_boolean() ? a.get<bool>() : a.get<int64_t>();
    int64_t y = b.is_boolean() ? b.get<bool>() : b.get<int64_t>();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    else if (op == "//" || op == "%") {
      if (y == 0) return Bad("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return Bad("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      r = op == "//" ? q : m;
    } else if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      r = 1;
      for (int64_t i = 0; i < y && !overflow; ++i) {
        overflow = __builtin_mul_overflow(r, x, &r);
        if (r == 0 || r == 1) break;
      }
      if (x == -1) r = (y % 2) ? -1 : 1;
    }
    if (overflow) return Bad(absl::StrCat("integer overflow in '", op, "'"));
    return Value(r);
  }
  double x = AsDouble(a), y = AsDouble(b);
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (y == 0 && (op == "/" || op == "//" || op == "%")) return Bad("division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  if (op == "%") {
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") return Value(std::pow(x, y));
  return type_error();
}

}  // namespace treespec::chat_template_internal
