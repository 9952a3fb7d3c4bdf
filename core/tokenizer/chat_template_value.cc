// Python semantics of template values: truthiness, str(), repr(), ==, <, and
// json.dumps(ensure_ascii=False) as transformers' `tojson` filter calls it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/chat_template_internal.h"

namespace treespec::chat_template_internal {

bool IsNumber(const Value& v) { return v.is_number() || v.is_boolean(); }

double AsDouble(const Value& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_float()) return v.get<double>();
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  return 0;
}

const char* TypeName(const Value& v) {
  if (IsUndefined(v)) return "undefined";
  if (v.is_null()) return "NoneType";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_array()) return "list";
  if (v.is_object()) return "dict";
  return "object";
}

bool Truthy(const Value& v) {
  if (IsUndefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return AsDouble(v) != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

namespace {

// Python float repr: the shortest digits that round-trip, scientific notation
// outside 1e-4 <= |x| < 1e16, ".0" on integral values.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);  // d.ddde[+-]XX
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string mantissa = sci.substr(0, e);
  if (exp < -4 || exp >= 16) {
    std::string exp_str = absl::StrCat(exp < 0 ? "-" : "+", std::abs(exp) < 10 ? "0" : "",
                                       std::abs(exp));
    return absl::StrCat(mantissa, "e", exp_str);
  }
  auto [end2, ec2] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::fixed);
  std::string fixed(buf, end2);
  if (fixed.find('.') == std::string::npos) fixed += ".0";
  return fixed;
}

std::string StringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back(quote);
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

absl::Status JsonDump(const Value& v, int indent, bool sort_keys, int level, std::string* out) {
  if (level > 256) return absl::InvalidArgumentError("tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * lvl, ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  if (IsUndefined(v)) return absl::InvalidArgumentError("tojson: Undefined is not JSON serializable");
  if (v.is_null()) {
    *out += "null";
  } else if (v.is_boolean()) {
    *out += v.get<bool>() ? "true" : "false";
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FloatRepr(d);
  } else if (v.is_number()) {
    *out += v.dump();
  } else if (v.is_string()) {
    JsonString(v.get_ref<const std::string&>(), out);
  } else if (v.is_array()) {
    if (v.empty()) {
      *out += "[]";
      return absl::OkStatus();
    }
    out->push_back('[');
    bool first = true;
    for (const Value& item : v) {
      if (!first) *out += item_sep;
      first = false;
      newline(level + 1);
      if (auto s = JsonDump(item, indent, sort_keys, level + 1, out); !s.ok()) return s;
    }
    newline(level);
    out->push_back(']');
  } else if (v.is_object()) {
    if (v.empty()) {
      *out += "{}";
      return absl::OkStatus();
    }
    std::vector<std::pair<std::string, const Value*>> items;
    for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(it.key(), &it.value());
    if (sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out->push_back('{');
    bool first = true;
    for (const auto& [key, item] : items) {
      if (!first) *out += item_sep;
      first = false;
      newline(level + 1);
      JsonString(key, out);
      *out += ": ";
      if (auto s = JsonDump(*item, indent, sort_keys, level + 1, out); !s.ok()) return s;
    }
    newline(level);
    out->push_back('}');
  }
  return absl::OkStatus();
}

}  // namespace

std::string Repr(const Value& v) {
  if (IsUndefined(v)) return "Undefined";
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return FloatRepr(v.get<double>());
  if (v.is_number()) return v.dump();
  if (v.is_string()) return StringRepr(v.get_ref<const std::string&>());
  std::string out;
  if (v.is_array()) {
    out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", Repr(v[i]));
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    absl::StrAppend(&out, first ? "" : ", ", StringRepr(it.key()), ": ", Repr(it.value()));
    first = false;
  }
  return out + "}";
}

std::string ToStr(const Value& v) {
  if (v.is_string()) return v.get<std::string>();
  if (IsUndefined(v)) return "";
  return Repr(v);
}

absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  if (auto s = JsonDump(v, indent, sort_keys, 0, &out); !s.ok()) return s;
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (IsUndefined(a) || IsUndefined(b)) return IsUndefined(a) && IsUndefined(b);
  if (IsNumber(a) && IsNumber(b)) {
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() == b.get<int64_t>();
    return AsDouble(a) == AsDouble(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!Equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !Equal(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

bool Less(const Value& a, const Value& b, bool* ok) {
  *ok = true;
  if (IsNumber(a) && IsNumber(b)) {
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() < b.get<int64_t>();
    return AsDouble(a) < AsDouble(b);
  }
  if (a.is_string() && b.is_string()) return a.get_ref<const std::string&>() < b.get_ref<const std::string&>();
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (Equal(a[i], b[i])) continue;
      return Less(a[i], b[i], ok);
    }
    return a.size() < b.size();
  }
  *ok = false;
  return false;
}

std::vector<size_t> CodePointOffsets(absl::string_view s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

namespace {

// Python str.isspace() for one code point given by its UTF-8 bytes.
bool IsPySpace(absl::string_view cp) {
  if (cp.size() == 1) {
    unsigned char c = cp[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  static constexpr absl::string_view kSpaces[] = {
      "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004",
      "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029",
      "\u202f", "\u205f", "\u3000"};
  for (absl::string_view sp : kSpaces) {
    if (cp == sp) return true;
  }
  return false;
}

}  // namespace

std::string Strip(absl::string_view s, bool left, bool right, const Value& chars) {
  std::vector<size_t> off = CodePointOffsets(s);
  size_t n = off.size() - 1;
  auto strippable = [&](size_t i) {
    absl::string_view cp = s.substr(off[i], off[i + 1] - off[i]);
    if (chars.is_string()) return absl::string_view(chars.get_ref<const std::string&>()).find(cp) != absl::string_view::npos;
    return IsPySpace(cp);
  };
  size_t begin = 0, end = n;
  if (left) {
    while (begin < end && strippable(begin)) ++begin;
  }
  if (right) {
    while (end > begin && strippable(end - 1)) --end;
  }
  return std::string(s.substr(off[begin], off[end] - off[begin]));
}

}  // namespace treespec::chat_template_internal
