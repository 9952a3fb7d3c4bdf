#include "core/util/json_fields.h"

#include "absl/strings/str_cat.h"

namespace treespec {

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
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    return static_cast<int64_t>(v.get<double>());
  }
  return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
}

absl::StatusOr<int64_t> JsonFields::IntOr(const std::string& key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  return Int(key);
}

absl::StatusOr<double> JsonFields::DoubleOr(const std::string& key, double fallback) const {
  if (!Has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
  return v.get<double>();
}

absl::StatusOr<bool> JsonFields::BoolOr(const std::string& key, bool fallback) const {
  if (!Has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v.dump()));
  return v.get<bool>();
}

absl::StatusOr<std::string> JsonFields::String(const std::string& key) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", v.dump()));
  return v.get<std::string>();
}

}  // namespace treespec
