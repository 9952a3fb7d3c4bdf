#include "core/spec/tree_packing.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace treespec {

absl::Status PackTree(const std::vector<int32_t>& parents, PackedTree* packed) {
  const int total = static_cast<int>(parents.size());
  const int words = (total + 63) / 64;
  packed->words_per_row = words;
  packed->masks.assign(static_cast<size_t>(total) * words, 0);
  packed->depth.assign(total, 0);
  for (int i = 0; i < total; ++i) {
    const int p = parents[i];
    if (p >= i || p < -1) {
      return absl::InvalidArgumentError(absl::StrCat("tree: parent of node ", i, " is ", p,
                                                     "; parents must precede children"));
    }
    uint64_t* row = &packed->masks[static_cast<size_t>(i) * words];
    if (p >= 0) {
      std::memcpy(row, &packed->masks[static_cast<size_t>(p) * words], sizeof(uint64_t) * words);
      packed->depth[i] = packed->depth[p] + 1;
    }
    row[i / 64] |= 1ull << (i % 64);
  }
  return absl::OkStatus();
}

}  // namespace treespec
