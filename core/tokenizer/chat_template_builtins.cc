// Filters, tests, str/dict methods and global functions of the chat-template
// subset, each with the Python/Jinja behaviour transformers' environment has.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <string>

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"

namespace treespec::chat_template_internal {
namespace {

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

// Positional argument i or keyword `name`, else `dflt`.
Value Arg(const std::vector<Value>& args, const Kwargs& kwargs, size_t i, absl::string_view name,
          Value dflt = Undefined()) {
  if (i < args.size()) return args[i];
  for (const auto& [key, value] : kwargs) {
    if (key == name) return value;
  }
  return dflt;
}

absl::Status CheckArity(absl::string_view what, const std::vector<Value>& args, const Kwargs& kwargs,
                        size_t max_args, std::initializer_list<absl::string_view> names) {
  if (args.size() > max_args) {
    return Bad(absl::StrCat(what, " takes at most ", max_args, " arguments, got ", args.size()));
  }
  for (const auto& [key, value] : kwargs) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      return Bad(absl::StrCat(what, " got an unexpected keyword argument '", key, "'"));
    }
  }
  return absl::OkStatus();
}

// Python str.upper() / str.lower(): full Unicode case mapping (ICU, root locale).
std::string UpperCase(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toUpper(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}
std::string LowerCase(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

// Python str.capitalize(): the first code point upper-cased, the rest lower-cased.
std::string Capitalize(const std::string& s) {
  std::vector<size_t> off = CodePointOffsets(s);
  if (off.size() < 2) return s;
  return UpperCase(s.substr(0, off[1])) + LowerCase(s.substr(off[1]));
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    unsigned char u = c;
    bool letter = u < 0x80 && std::isalpha(u);
    if (letter) c = prev_letter ? std::tolower(u) : std::toupper(u);
    prev_letter = letter || u >= 0x80;
  }
  return out;
}

absl::StatusOr<Value> Replace(const std::string& s, const Value& old_v, const Value& new_v,
                              const Value& count_v, int64_t max_bytes) {
  if (!old_v.is_string() || !new_v.is_string()) return Bad("replace() arguments must be strings");
  const std::string& from = old_v.get_ref<const std::string&>();
  const std::string& to = new_v.get_ref<const std::string&>();
  int64_t count = count_v.is_number_integer() ? count_v.get<int64_t>() : -1;
  std::string out;
  if (from.empty()) {
    std::vector<size_t> off = CodePointOffsets(s);
    for (size_t i = 0; i + 1 <= off.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i + 1 < off.size()) out.append(s, off[i], off[i + 1] - off[i]);
      if (static_cast<int64_t>(out.size()) > max_bytes) return Bad("replace() result too long");
    }
    return Value(out);
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
    if (static_cast<int64_t>(out.size()) > max_bytes) return Bad("replace() result too long");
  }
  out.append(s, pos);
  return Value(out);
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Value out = Value::array();
  if (!sep.is_string()) {
    std::vector<size_t> off = CodePointOffsets(s);
    auto is_space = [&](size_t i) {
      absl::string_view cp(s.data() + off[i], off[i + 1] - off[i]);
      return Strip(cp, true, true, Undefined()).empty();
    };
    size_t n = off.size() - 1, i = 0;
    while (i < n) {
      while (i < n && is_space(i)) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(Strip(s.substr(off[i]), false, true, Undefined()));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(j)) ++j;
      out.push_back(s.substr(off[i], off[j] - off[i]));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.get_ref<const std::string&>();
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

absl::StatusOr<Value> ToList(const Value& v) {
  if (IsUndefined(v)) return Value::array();
  if (v.is_array()) return v;
  Value out = Value::array();
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
    return out;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    std::vector<size_t> off = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < off.size(); ++i) out.push_back(s.substr(off[i], off[i + 1] - off[i]));
    return out;
  }
  return Bad(absl::StrCat("'", TypeName(v), "' object is not iterable"));
}

}  // namespace

absl::StatusOr<Value> CallFilter(const std::string& name, const Value& input,
                                 const std::vector<Value>& args, const Kwargs& kwargs,
                                 const CallLimits& limits) {
  const std::string what = absl::StrCat("filter '", name, "'");
  if (name == "trim") {
    if (auto s = CheckArity(what, args, kwargs, 1, {"chars"}); !s.ok()) return s;
    return Value(Strip(ToStr(input), true, true, Arg(args, kwargs, 0, "chars")));
  }
  if (name == "tojson") {
    if (auto s = CheckArity(what, args, kwargs, 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
        !s.ok()) {
      return s;
    }
    if (Truthy(Arg(args, kwargs, 0, "ensure_ascii"))) return Bad("tojson: ensure_ascii=true is not supported");
    if (!Arg(args, kwargs, 2, "separators").is_null() && !IsUndefined(Arg(args, kwargs, 2, "separators"))) {
      return Bad("tojson: separators are not supported");
    }
    Value indent = Arg(args, kwargs, 1, "indent");
    int indent_n = -1;
    if (indent.is_number_integer()) indent_n = std::clamp<int64_t>(indent.get<int64_t>(), 0, 64);
    else if (!indent.is_null() && !IsUndefined(indent)) return Bad("tojson: indent must be an integer");
    auto json = ToJson(input, indent_n, Truthy(Arg(args, kwargs, 3, "sort_keys")));
    if (!json.ok()) return json.status();
    if (static_cast<int64_t>(json->size()) > limits.max_bytes) return Bad("tojson: result too long");
    return Value(std::move(*json));
  }
  if (name == "length" || name == "count") {
    if (IsUndefined(input)) return Value(0);
    if (input.is_string()) return Value(static_cast<int64_t>(CodePointOffsets(input.get<std::string>()).size() - 1));
    if (input.is_array() || input.is_object()) return Value(static_cast<int64_t>(input.size()));
    return Bad(absl::StrCat("object of type '", TypeName(input), "' has no len()"));
  }
  if (name == "upper") return Value(UpperCase(ToStr(input)));
  if (name == "lower") return Value(LowerCase(ToStr(input)));
  if (name == "capitalize") return Value(Capitalize(ToStr(input)));
  if (name == "title") return Value(Title(ToStr(input)));
  if (name == "string") return Value(ToStr(input));
  if (name == "safe") return input;
  if (name == "default" || name == "d") {
    if (auto s = CheckArity(what, args, kwargs, 2, {"default_value", "boolean"}); !s.ok()) return s;
    bool boolean = Truthy(Arg(args, kwargs, 1, "boolean"));
    if (IsUndefined(input) || (boolean && !Truthy(input))) {
      Value d = Arg(args, kwargs, 0, "default_value", "");
      return d;
    }
    return input;
  }
  if (name == "first" || name == "last") {
    auto list = ToList(input);
    if (!list.ok()) return list.status();
    if (list->empty()) return Undefined();
    return name == "first" ? list->front() : list->back();
  }
  if (name == "list") return ToList(input);
  if (name == "reverse") {
    auto list = ToList(input);
    if (!list.ok()) return list.status();
    std::reverse(list->begin(), list->end());
    if (!input.is_string()) return list;
    std::string out;
    for (const Value& c : *list) out += c.get<std::string>();
    return Value(out);
  }
  if (name == "join") {
    if (auto s = CheckArity(what, args, kwargs, 1, {"d"}); !s.ok()) return s;
    auto list = ToList(input);
    if (!list.ok()) return list.status();
    std::string sep = ToStr(Arg(args, kwargs, 0, "d", ""));
    std::string out;
    for (size_t i = 0; i < list->size(); ++i) {
      absl::StrAppend(&out, i ? sep : "", ToStr((*list)[i]));
      if (static_cast<int64_t>(out.size()) > limits.max_bytes) return Bad("join: result too long");
    }
    return Value(out);
  }
  if (name == "items") {
    if (IsUndefined(input)) return Value::array();
    if (!input.is_object()) return Bad(absl::StrCat("items: expected a mapping, got '", TypeName(input), "'"));
    return CallMethod(input, "items", {}, {});
  }
  if (name == "replace") {
    if (args.size() < 2) return Bad("replace filter needs old and new");
    return Replace(ToStr(input), args[0], args[1], args.size() > 2 ? args[2] : Undefined(),
                   limits.max_bytes);
  }
  if (name == "int" || name == "float") {
    Value dflt = Arg(args, kwargs, 0, "default", name == "int" ? Value(0) : Value(0.0));
    if (IsNumber(input)) {
      return name == "int" ? Value(static_cast<int64_t>(AsDouble(input))) : Value(AsDouble(input));
    }
    if (input.is_string()) {
      std::string s = Strip(input.get<std::string>(), true, true, Undefined());
      int64_t i;
      double d;
      if (name == "int" && absl::SimpleAtoi(s, &i)) return Value(i);
      if (absl::SimpleAtod(s, &d)) return name == "int" ? Value(static_cast<int64_t>(d)) : Value(d);
    }
    return dflt;
  }
  if (name == "abs") {
    if (!IsNumber(input)) return Bad(absl::StrCat("bad operand type for abs(): '", TypeName(input), "'"));
    if (input.is_number_float()) return Value(std::abs(input.get<double>()));
    int64_t v = input.is_boolean() ? input.get<bool>() : input.get<int64_t>();
    if (v == INT64_MIN) return Bad("integer overflow in abs()");
    return Value(v < 0 ? -v : v);
  }
  return Bad(absl::StrCat("unknown filter '", name, "'"));
}

absl::StatusOr<bool> CallTest(const std::string& name, const Value& input,
                              const std::vector<Value>& args) {
  if (name == "defined") return !IsUndefined(input);
  if (name == "undefined") return IsUndefined(input);
  if (name == "none") return input.is_null();
  if (name == "string") return input.is_string();
  if (name == "number") return IsNumber(input);
  if (name == "integer") return input.is_number_integer();
  if (name == "float") return input.is_number_float();
  if (name == "boolean") return input.is_boolean();
  if (name == "true") return input.is_boolean() && input.get<bool>();
  if (name == "false") return input.is_boolean() && !input.get<bool>();
  if (name == "mapping") return input.is_object();
  if (name == "iterable" || name == "sequence") {
    return IsUndefined(input) || input.is_string() || input.is_array() || input.is_object();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!IsNumber(input)) return Bad(absl::StrCat("test '", name, "' needs a number, got '", TypeName(input), "'"));
    if (!input.is_number_integer() && !input.is_boolean()) {
      double m = std::fmod(AsDouble(input), 2.0);
      if (m < 0) m += 2.0;
      if (name == "odd") return m == 1.0;
      if (name == "even") return m == 0.0;
      return Bad("divisibleby needs an integer");
    }
    int64_t v = input.is_boolean() ? input.get<bool>() : input.get<int64_t>();
    if (name == "odd") return v % 2 != 0;
    if (name == "even") return v % 2 == 0;
    if (args.empty() || !args[0].is_number_integer() || args[0].get<int64_t>() == 0) {
      return Bad("divisibleby needs a non-zero integer");
    }
    return v % args[0].get<int64_t>() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "ne") {
    if (args.empty()) return Bad(absl::StrCat("test '", name, "' needs an argument"));
    return Equal(input, args[0]) == (name != "ne");
  }
  return Bad(absl::StrCat("unknown test '", name, "'"));
}

absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name,
                                 const std::vector<Value>& args, const Kwargs& kwargs) {
  const std::string what = absl::StrCat("method '", name, "'");
  if (obj.is_string()) {
    const std::string& s = obj.get_ref<const std::string&>();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      if (auto st = CheckArity(what, args, kwargs, 1, {}); !st.ok()) return st;
      return Value(Strip(s, name != "rstrip", name != "lstrip", Arg(args, kwargs, 0, "")));
    }
    if (name == "startswith" || name == "endswith") {
      if (args.size() != 1) return Bad(absl::StrCat(what, " takes 1 argument"));
      std::vector<Value> options = args[0].is_array() ? std::vector<Value>(args[0].begin(), args[0].end())
                                                      : std::vector<Value>{args[0]};
      for (const Value& o : options) {
        if (!o.is_string()) return Bad(absl::StrCat(what, " argument must be a string"));
        const std::string& p = o.get_ref<const std::string&>();
        bool hit = name == "startswith"
                       ? s.compare(0, p.size(), p) == 0
                       : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        if (hit) return Value(true);
      }
      return Value(false);
    }
    if (name == "split") {
      if (auto st = CheckArity(what, args, kwargs, 2, {"sep", "maxsplit"}); !st.ok()) return st;
      Value sep = Arg(args, kwargs, 0, "sep");
      Value maxsplit = Arg(args, kwargs, 1, "maxsplit", -1);
      if (sep.is_string() && sep.get_ref<const std::string&>().empty()) return Bad("split: empty separator");
      return Split(s, sep, maxsplit.is_number_integer() ? maxsplit.get<int64_t>() : -1);
    }
    if (name == "upper") return Value(UpperCase(s));
    if (name == "lower") return Value(LowerCase(s));
    if (name == "title") return Value(Title(s));
    if (name == "capitalize") return Value(Capitalize(s));
    if (name == "replace") {
      if (args.size() < 2) return Bad("replace() needs old and new");
      return Replace(s, args[0], args[1], args.size() > 2 ? args[2] : Undefined(), 8 << 20);
    }
  }
  if (obj.is_object()) {
    if (name == "items" || name == "keys" || name == "values") {
      Value out = Value::array();
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (name == "items") out.push_back(Value::array({it.key(), it.value()}));
        else if (name == "keys") out.push_back(it.key());
        else out.push_back(it.value());
      }
      return out;
    }
    if (name == "get") {
      if (args.empty() || args.size() > 2) return Bad("get() takes 1 or 2 arguments");
      Value dflt = args.size() > 1 ? args[1] : Value(nullptr);
      if (!args[0].is_string()) return dflt;
      auto it = obj.find(args[0].get<std::string>());
      return it != obj.end() ? *it : dflt;
    }
  }
  return Bad(absl::StrCat("'", TypeName(obj), "' object has no method '", name, "'"));
}

bool IsGlobalFunction(const std::string& name) {
  return name == "namespace" || name == "range" || name == "strftime_now" || name == "dict";
}

absl::StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                                 const Kwargs& kwargs, const CallLimits& limits) {
  if (name == "namespace" || name == "dict") {
    Value out = Value::object();
    for (const Value& a : args) {
      if (!a.is_object()) return Bad(absl::StrCat(name, "() positional arguments must be mappings"));
      for (auto it = a.begin(); it != a.end(); ++it) out[it.key()] = it.value();
    }
    for (const auto& [key, value] : kwargs) out[key] = value;
    return out;
  }
  if (name == "range") {
    if (args.empty() || args.size() > 3 || !kwargs.empty()) return Bad("range() takes 1 to 3 integers");
    for (const Value& a : args) {
      if (!a.is_number_integer()) return Bad(absl::StrCat("range() arguments must be integers, got '", TypeName(a), "'"));
    }
    int64_t start = args.size() > 1 ? args[0].get<int64_t>() : 0;
    int64_t stop = args.size() > 1 ? args[1].get<int64_t>() : args[0].get<int64_t>();
    int64_t step = args.size() > 2 ? args[2].get<int64_t>() : 1;
    if (step == 0) return Bad("range() step must not be zero");
    Value out = Value::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= limits.max_bytes) return Bad("range() too long");
      out.push_back(i);
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return out;
  }
  if (name == "strftime_now") {
    if (args.size() != 1 || !args[0].is_string()) return Bad("strftime_now() takes one format string");
    std::time_t now = std::time(nullptr);
    std::tm tm;
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), args[0].get<std::string>().c_str(), &tm);
    return Value(std::string(buf, n));
  }
  return Bad(absl::StrCat("unknown function '", name, "'"));
}

}  // namespace treespec::chat_template_internal
