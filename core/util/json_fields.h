// Typed, error-reporting access to fields of a JSON object (nlohmann::json),
// used by the config and safetensors parsers. Errors are INVALID_ARGUMENT and
// name the file and the field. Never throws.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace treespec {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  bool Has(const std::string& key) const;
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  absl::StatusOr<int64_t> IntOr(const std::string& key, int64_t fallback) const;
  absl::StatusOr<double> DoubleOr(const std::string& key, double fallback) const;
  absl::StatusOr<bool> BoolOr(const std::string& key, bool fallback) const;
  absl::StatusOr<std::string> String(const std::string& key) const;
  absl::Status Error(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& obj_;
  std::string path_;
};

// `v` as compact JSON for an error message: at most `max_chars` characters
// (then "..."), values nested more than 4 levels down shown as [...] or {...}.
// Unlike nlohmann's dump(), which recurses once per level and overflows the
// stack on a hostile 100000-deep document, it never goes deeper than that.
std::string JsonExcerpt(const nlohmann::json& v, size_t max_chars = 80);

// Parses JSON text without exceptions; INVALID_ARGUMENT naming `path` on error.
absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& path);

}  // namespace treespec
