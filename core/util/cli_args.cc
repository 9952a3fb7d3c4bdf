#include "core/util/cli_args.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace treespec {

std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage) {
  storage->clear();
  storage->reserve(argc);
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") flags_done = true;
    if (!flags_done && i > 0 && a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t end = a.find('=');
      for (size_t k = 2; k < std::min(end, a.size()); ++k) {
        if (a[k] == '-') a[k] = '_';
      }
    }
    storage->push_back(std::move(a));
  }
  std::vector<char*> out;
  for (std::string& s : *storage) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}



void ConfigureFlagHelp() {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) { return !absl::StrContains(file, "absl/"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

std::vector<std::string> ParseFlags(int argc, char** argv) {
  ConfigureFlagHelp();
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, args.data());
  return std::vector<std::string>(rest.begin(), rest.end());
}

}  // namespace treespec
