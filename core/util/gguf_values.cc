// GgufFile's typed metadata accessors (declared in core/util/gguf.h).
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/gguf.h"

namespace treespec {

namespace {
absl::Status TypeError(const std::string& path, const std::string& key, const GgufValue& v,
                       const char* want) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": metadata '", key, "' has type ", GgufValueTypeName(v.type),
      v.is_array() ? absl::StrCat(" of ", GgufValueTypeName(v.elem_type)) : std::string(),
      ", expected ", want));
}
}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  if (const int64_t* i = std::get_if<int64_t>(&v->scalar);
      i && !v->is_array() && GgufIsIntType(v->type)) {
    return *i;
  }
  return TypeError(path_, key, *v, "an integer");
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(const std::string& key, int64_t def) const {
  if (Find(key) == nullptr) return def;
  return GetInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(const std::string& key, double def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return def;
  if (v->is_array()) return TypeError(path_, key, *v, "a number");
  if (const double* d = std::get_if<double>(&v->scalar)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&v->scalar)) return static_cast<double>(*i);
  return TypeError(path_, key, *v, "a number");
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  if (const std::string* s = std::get_if<std::string>(&v->scalar); s && !v->is_array()) return *s;
  return TypeError(path_, key, *v, "a string");
}

absl::StatusOr<bool> GgufFile::GetBoolOr(const std::string& key, bool def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return def;
  if (const bool* b = std::get_if<bool>(&v->scalar); b && v->type == GgufValueType::kBool)
    return *b;
  return TypeError(path_, key, *v, "a bool");
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  if (!v->is_array() || v->elem_type != GgufValueType::kString) {
    return TypeError(path_, key, *v, "an array of string");
  }
  return &v->strings;
}

absl::StatusOr<const std::vector<double>*> GgufFile::GetFloatArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  if (!v->is_array() ||
      (v->elem_type != GgufValueType::kFloat32 && v->elem_type != GgufValueType::kFloat64)) {
    return TypeError(path_, key, *v, "an array of float");
  }
  return &v->floats;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetIntArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  if (!v->is_array() || !GgufIsIntType(v->elem_type)) {
    return TypeError(path_, key, *v, "an array of integers");
  }
  return &v->ints;
}

}  // namespace treespec
