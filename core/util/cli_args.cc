#include "core/util/cli_args.h"

#include "absl/flags/internal/parse.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

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

std::string HelpFileName(absl::string_view file) {
  // This file's own __FILE__ is "<prefix>core/util/cli_args.cc", where <prefix>
  // is however the build spelled the source root (absolute, or "../" from the
  // build directory); every file of the build carries the same prefix.
  constexpr absl::string_view kSelf = "core/util/cli_args.cc";
  const absl::string_view self = __FILE__;
  if (absl::EndsWith(self, kSelf)) {
    const absl::string_view prefix = self.substr(0, self.size() - kSelf.size());
    if (absl::ConsumePrefix(&file, prefix)) return std::string(file);
  }
  // Abseil's own flags: from its "absl/" folder on.
  const size_t absl_dir = file.rfind("absl/");
  if (absl_dir != absl::string_view::npos) return std::string(file.substr(absl_dir));
  return std::string(file);
}

void ConfigureFlagHelp() {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) { return !absl::StartsWith(file, "absl/"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  config.normalize_filename = HelpFileName;
  absl::SetFlagsUsageConfig(config);
}

std::vector<std::string> ParseFlags(int argc, char** argv) {
#ifdef NDEBUG
  // Abseil's Mutex deadlock detection (on in the distribution's libabsl)
  // records a stack trace and a lock-graph edge on every acquisition: 5% of
  // a coordinator lane thread's CPU per step under perf (spec_bench, c=1).
  // Release binaries turn it off; debug builds and tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  ConfigureFlagHelp();
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, args.data());
  return std::vector<std::string>(rest.begin(), rest.end());
}

// absl 20220623 keeps CommandLineFlag::IsSpecifiedOnCommandLine private; this
// is what it calls.
bool FlagGiven(absl::string_view name) {
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

absl::StatusOr<std::vector<int>> ParsePositiveInts(absl::string_view flag, absl::string_view text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", item, "\" is not a positive integer"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace treespec
