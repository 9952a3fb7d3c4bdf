// Command-line spelling: lets every binary accept both --max-tokens and
// --max_tokens (absl flags only know underscores). Returns argv with dashes in
// flag names (before any '=') turned into underscores; the strings live in
// `storage`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace treespec {

std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage);

// A flag's defining file as --help shows it: relative to the source root
// ("tools/cli/logits_main.cc"), never the path of the machine that built it;
// Abseil's own files from "absl/" on.
std::string HelpFileName(absl::string_view file);

// Makes --help list the binary's own flags (absl's default matches only
// flags defined in a file named like the program) under HelpFileName.
void ConfigureFlagHelp();

// Parses argv with absl flags (after NormalizeFlagNames and
// ConfigureFlagHelp) and returns the positional arguments, the program name
// first. In release builds (NDEBUG) it also turns off Abseil's Mutex
// deadlock detection for the process (see cli_args.cc).
std::vector<std::string> ParseFlags(int argc, char** argv);

// After ParseFlags: whether flag `name` (underscored) was on the command line
// or in a --flagfile, even with its default or an empty value ("--ids ''").
bool FlagGiven(absl::string_view name);

// A comma-separated list of positive integers ("1,2,16"; empty items are
// skipped), e.g. a benchmark's thread counts or batch sizes. INVALID_ARGUMENT
// naming --flag and the bad item otherwise.
absl::StatusOr<std::vector<int>> ParsePositiveInts(absl::string_view flag, absl::string_view text);

}  // namespace treespec
