// Command-line spelling: lets every binary accept both --max-tokens and
// --max_tokens (absl flags only know underscores). Returns argv with dashes in
// flag names (before any '=') turned into underscores; the strings live in
// `storage`.
#pragma once

#include <string>
#include <vector>

namespace treespec {

std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage);

}  // namespace treespec
