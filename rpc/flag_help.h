// Makes `--help` list the flags of treespec's own files: absl's default only
// lists flags defined in a file named after the binary (treespec-worker.cc),
// which none of ours is. Call in main() before parsing flags.
#pragma once

namespace treespec {

void ConfigureFlagHelp();

}  // namespace treespec
