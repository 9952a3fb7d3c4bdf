#include "core/tokenizer/tokenizer_config.h"

#include "absl/strings/str_cat.h"
#include "core/util/json_fields.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using nlohmann::json;

// Reads `dir`/`name` as a JSON object; a missing file gives a null json.
absl::StatusOr<json> ReadOptionalJson(const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  if (!FileExists(path)) return json();
  TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TS_ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

// A token given as "text" or {"content": "text", ...}; "" when absent or null.
absl::StatusOr<std::string> TokenString(const json& obj, const std::string& key,
                                        const std::string& file) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      file, ": field '", key, "' must be a string or {\"content\": string}, got ", JsonExcerpt(*it)));
}

absl::StatusOr<std::optional<bool>> OptionalBool(const json& obj, const std::string& key,
                                                 const std::string& file) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": field '", key, "' must be true or false, got ", JsonExcerpt(*it)));
  }
  return std::optional<bool>(it->get<bool>());
}

// Appends eos_token_id (an int or a list of ints) to *ids, skipping repeats.
absl::Status AppendIds(const json& obj, const std::string& key, const std::string& file,
                       std::vector<int32_t>* ids) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  std::vector<json> values;
  if (it->is_array()) {
    values.assign(it->begin(), it->end());
  } else {
    values.push_back(*it);
  }
  for (const json& v : values) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": field '", key, "' must be a non-negative integer or a list of them, got ",
          JsonExcerpt(*it)));
    }
    const int32_t id = static_cast<int32_t>(v.get<int64_t>());
    bool seen = false;
    for (int32_t x : *ids) seen = seen || x == id;
    if (!seen) ids->push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseTokenizerConfigJson(const std::string& text, const std::string& path,
                                      TokenizerConfig* cfg) {
  TS_ASSIGN_OR_RETURN(json tc, ParseJson(text, path));
  if (!tc.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  TS_ASSIGN_OR_RETURN(cfg->add_bos_token, OptionalBool(tc, "add_bos_token", path));
  TS_ASSIGN_OR_RETURN(cfg->add_eos_token, OptionalBool(tc, "add_eos_token", path));
  TS_ASSIGN_OR_RETURN(cfg->bos_token, TokenString(tc, "bos_token", path));
  TS_ASSIGN_OR_RETURN(cfg->eos_token, TokenString(tc, "eos_token", path));
  TS_ASSIGN_OR_RETURN(std::optional<bool> clean,
                      OptionalBool(tc, "clean_up_tokenization_spaces", path));
  cfg->clean_up_tokenization_spaces = clean.value_or(false);
  auto it = tc.find("tokenizer_class");
  if (it != tc.end() && it->is_string()) cfg->tokenizer_class = it->get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& dir) {
  TokenizerConfig cfg;
  const std::string tc_file = absl::StrCat(dir, "/tokenizer_config.json");
  if (FileExists(tc_file)) {
    TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(tc_file));
    TS_RETURN_IF_ERROR(ParseTokenizerConfigJson(text, tc_file, &cfg));
  }
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string file = absl::StrCat(dir, "/", name);
    TS_ASSIGN_OR_RETURN(json j, ReadOptionalJson(dir, name));
    if (!j.is_object()) continue;
    TS_RETURN_IF_ERROR(AppendIds(j, "eos_token_id", file, &cfg.eos_token_ids));
    if (cfg.bos_token_id < 0) {
      std::vector<int32_t> bos;
      TS_RETURN_IF_ERROR(AppendIds(j, "bos_token_id", file, &bos));
      if (!bos.empty()) cfg.bos_token_id = bos[0];
    }
  }
  return cfg;
}

}  // namespace treespec
