#include "core/util/json_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

// Appends `v` to *out, stopping once *out holds more than `limit` characters.
void AppendExcerpt(const nlohmann::json& v, int depth, size_t limit, std::string* out) {
  if (out->size() > limit) return;
  if (!v.is_structured()) {
    out->append(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  if (depth >= 4) {
    out->append(v.is_array() ? "[...]" : "{...}");
    return;
  }
  out->push_back(v.is_array() ? '[' : '{');
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out->size() <= limit; ++it) {
    if (!first) out->push_back(',');
    first = false;
    if (v.is_object()) {
      AppendExcerpt(nlohmann::json(it.key()), depth + 1, limit, out);
      out->push_back(':');
    }
    AppendExcerpt(it.value(), depth + 1, limit, out);
  }
  out->push_back(v.is_array() ? ']' : '}');
}

}  // namespace

std::string JsonExcerpt(const nlohmann::json& v, size_t max_chars) {
  std::string out;
  AppendExcerpt(v, 0, max_chars, &out);
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON"));
  return j;
}

bool JsonFields::Has(const std::string& key) const {
  return obj_.is_object() && obj_.contains(key) && !obj_[key].is_null();
}

absl::Status JsonFields::Error(const std::string& key, const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": field '", key, "' ", what));
}

absl::StatusOr<int64_t> JsonFields::Int(const std::string& key) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  // A float with an integer value (e.g. 1e5) in int64's range; casting one
  // outside it would be undefined.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && std::floor(d) == d) return static_cast<int64_t>(d);
  }
  return Error(key, absl::StrCat("must be an integer, got ", JsonExcerpt(v)));
}

absl::StatusOr<int64_t> JsonFields::IntOr(const std::string& key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  return Int(key);
}

absl::StatusOr<double> JsonFields::DoubleOr(const std::string& key, double fallback) const {
  if (!Has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", JsonExcerpt(v)));
  return v.get<double>();
}

absl::StatusOr<bool> JsonFields::BoolOr(const std::string& key, bool fallback) const {
  if (!Has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", JsonExcerpt(v)));
  return v.get<bool>();
}

absl::StatusOr<std::string> JsonFields::String(const std::string& key) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", JsonExcerpt(v)));
  return v.get<std::string>();
}

}  // namespace treespec
