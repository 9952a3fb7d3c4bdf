// The models and token trees stree_bench measures (tools/bench/stree_bench.cc).
//
// Models are named presets of realistic shapes with random weights (the
// timing and memory of a pass do not depend on the values), or a directory
// holding a Mamba2ForCausalLM / BambaForCausalLM checkpoint. Trees are the
// full binary trees of paper 001 §5.1 ("binary:4" has 4 levels, root
// included: 15 nodes) and TreeShape texts ("3,2,2,1,1", "chain:4"), packed
// level by level as the drafters build them (drafter_service/tree_drafter.cc).
// Plain data; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/model/hybrid.h"
#include "core/tensor/backend.h"

namespace treespec::bench {

struct BenchModel {
  std::string name;     // the preset name, or the directory
  std::string dir;      // non-empty: load this checkpoint instead of random weights
  HybridConfig config;  // of the preset or the checkpoint
  std::string Describe() const;  // "mamba2, 24 layers (0 attention), hidden 768, ..."
};

// "mamba2-demo", "bamba-demo", "mamba2-130m", "bamba-130m", or a directory
// (anything with a '/'). INVALID_ARGUMENT naming the preset otherwise.
absl::StatusOr<BenchModel> ParseBenchModel(const std::string& name);
// Random weights (a fixed seed, so every instance is the same model) or the checkpoint.
absl::StatusOr<std::unique_ptr<HybridModel>> BuildModel(const BenchModel& model, Backend* backend);

struct BenchTree {
  std::string name;
  std::vector<int32_t> parents;                // [nodes], level by level; parents[0] = -1
  std::vector<std::vector<int32_t>> branches;  // every root-to-leaf path, leaves in node order
  int32_t depth = 0;                           // nodes on the longest path

  int64_t num_nodes() const { return static_cast<int64_t>(parents.size()); }
  int64_t num_branches() const { return static_cast<int64_t>(branches.size()); }
  // Tokens the unrolled method computes: the branches' lengths summed.
  int64_t unrolled_tokens() const;
};

// "binary:D" (D levels, D in [1, 10]) or a TreeShape text.
absl::StatusOr<BenchTree> ParseBenchTree(const std::string& spec);

}  // namespace treespec::bench
