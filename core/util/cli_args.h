// Command-line spelling: lets every binary accept both --max-tokens and
// --max_tokens (absl flags only know underscores). Returns argv with dashes in
// flag names (before any '=') turned into underscores; the strings live in
// `storage`.
#pragma once

#include <string>
#include <vector>

namespace treespec {

std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage);

// Makes --help list the binary's own flags (absl's default matches only
// flags defined in a file named like the program).
void ConfigureFlagHelp();

// Parses argv with absl flags (after NormalizeFlagNames and
// ConfigureFlagHelp) and returns the positional arguments, the program name
// first.
std::vector<std::string> ParseFlags(int argc, char** argv);

}  // namespace treespec
