// Field checks shared by the config.json parsers (config.cc,
// hybrid_config.cc). Errors name the file and field. Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/util/json_fields.h"

namespace treespec::config_detail {

// Every size in a config is at most 2^24 (the largest real ones, vocabularies
// and MLP widths, are near 2^18).
constexpr int64_t kMaxDimension = int64_t{1} << 24;

// INVALID_ARGUMENT naming `key` unless 1 <= v <= kMaxDimension.
absl::Status Dimension(const JsonFields& f, const std::string& key, int64_t v);
// UNIMPLEMENTED naming `key` when it is present and not silu / swish (which
// transformers' ACT2FN both maps to SiLU, the only activation computed).
absl::Status CheckSilu(const JsonFields& f, const std::string& key);
// `text` with the bare tokens Infinity, -Infinity and NaN outside strings (what
// Python's json writes for non-finite floats, transformers < 5 in
// time_step_limit) replaced by {"__float__": "..."}, the form transformers 5
// writes, so that the JSON parser takes them.
std::string NormalizeNonFiniteJson(const std::string& text);

}  // namespace treespec::config_detail
