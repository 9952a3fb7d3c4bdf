#include "rpc/flag_help.h"

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace treespec {

void ConfigureFlagHelp() {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) { return !absl::StrContains(file, "absl/"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace treespec
