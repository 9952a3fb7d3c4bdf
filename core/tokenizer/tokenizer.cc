#include "core/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/tokenizer/gguf_tokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/tokenizer_internal.h"
#include "core/util/status_macros.h"

namespace treespec {

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < is_special_.size() && is_special_[id];
}

bool Tokenizer::IsEos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

absl::StatusOr<SpecialIds> ResolveSpecialIds(
    const TokenizerConfig& config, const std::string& config_dir,
    const std::function<int32_t(const std::string&)>& lookup, int32_t default_bos,
    int32_t default_eos) {
  auto resolve = [&](const std::string& field, const std::string& token) -> absl::StatusOr<int32_t> {
    const int32_t id = lookup(token);
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_dir, "/tokenizer_config.json: field '", field, "' names '", token,
                       "', which is not in the vocabulary"));
    }
    return id;
  };
  SpecialIds ids;
  ids.bos = default_bos;
  if (!config.bos_token.empty()) {
    TS_ASSIGN_OR_RETURN(ids.bos, resolve("bos_token", config.bos_token));
  } else if (config.bos_token_id >= 0) {
    ids.bos = config.bos_token_id;
  }
  if (!config.eos_token.empty()) {
    TS_ASSIGN_OR_RETURN(int32_t eos, resolve("eos_token", config.eos_token));
    ids.eos.push_back(eos);
  }
  for (int32_t id : config.eos_token_ids) {
    if (std::find(ids.eos.begin(), ids.eos.end(), id) == ids.eos.end()) ids.eos.push_back(id);
  }
  if (ids.eos.empty() && default_eos >= 0) ids.eos.push_back(default_eos);
  return ids;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir;
  std::string file;
  bool is_json = false;
  if (fs::is_directory(path, ec)) {
    dir = path;
    if (fs::is_regular_file(path + "/tokenizer.json", ec)) {
      file = path + "/tokenizer.json";
      is_json = true;
    } else if (fs::is_regular_file(path + "/tokenizer.model", ec)) {
      file = path + "/tokenizer.model";
    } else {
      return absl::NotFoundError(
          absl::StrCat(path, ": neither tokenizer.json nor tokenizer.model is there"));
    }
  } else if (fs::is_regular_file(path, ec) && path.size() > 5 &&
             absl::EndsWithIgnoreCase(path, ".gguf")) {
    return LoadGgufTokenizer(path);
  } else if (fs::is_regular_file(path, ec)) {
    file = path;
    dir = fs::path(path).parent_path().string();
    if (dir.empty()) dir.assign(1, '.');
    is_json = fs::path(path).extension() == ".json";
  } else {
    return absl::NotFoundError(absl::StrCat(path, ": no such tokenizer file or directory"));
  }
  TS_ASSIGN_OR_RETURN(TokenizerConfig config, ReadTokenizerConfig(dir));
  if (is_json) return LoadHfTokenizer(file, config);
  return LoadSentencePieceTokenizer(file, config);
}

}  // namespace treespec
