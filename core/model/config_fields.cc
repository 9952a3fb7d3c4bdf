#include "core/model/config_fields.h"

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec::config_detail {

absl::Status Dimension(const JsonFields& f, const std::string& key, int64_t v) {
  if (v <= 0 || v > kMaxDimension) {
    return f.Error(key, absl::StrCat("must be between 1 and ", kMaxDimension, ", got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckSilu(const JsonFields& f, const std::string& key) {
  if (!f.Has(key)) return absl::OkStatus();
  TS_ASSIGN_OR_RETURN(std::string act, f.String(key));
  if (act != "silu" && act != "swish") {
    return absl::UnimplementedError(absl::StrCat("config.json: ", key, " '", act,
                                                 "' is not supported (only silu / swish)"));
  }
  return absl::OkStatus();
}

std::string NormalizeNonFiniteJson(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const std::string t(token);
      if (text.compare(i, t.size(), t) == 0) {
        out += absl::StrCat("{\"__float__\": \"", t, "\"}");
        i += t.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(c);
  }
  return out;
}

}  // namespace treespec::config_detail
