#include "core/spec/beam_tree.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::Status Beams::Validate() const {
  if (width < 1) return absl::InvalidArgumentError(absl::StrCat("beam width ", width, " < 1"));
  if (length < 1) return absl::InvalidArgumentError(absl::StrCat("beam length ", length, " < 1"));
  const int64_t n = int64_t{width} * length;
  if (n > kMaxTreeNodes - 1) {
    return absl::InvalidArgumentError(absl::StrCat("beam width x length = ", width, " x ",
                                                   length, " exceeds the tree limit of ",
                                                   kMaxTreeNodes - 1, " draft nodes"));
  }
  if (length > kMaxTreeDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam length ", length, " exceeds the tree depth limit ", kMaxTreeDepth));
  }
  if (static_cast<int64_t>(tokens.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("beam tokens has ", tokens.size(),
                                                   " entries, not width x length = ", n));
  }
  if (!log_probs.empty() && static_cast<int64_t>(log_probs.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "beam log_probs has ", log_probs.size(), " entries; it must be empty or ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("beam tokens[", i, "] = ", tokens[i], " is negative"));
    }
    if (!log_probs.empty() && !(std::isfinite(log_probs[i]) && log_probs[i] <= 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("beam log_probs[", i, "] = ", log_probs[i], " is not a log-probability"));
    }
  }
  return absl::OkStatus();
}

// The tensor form of App. A.1 without the tensors: matches[i][k][j] is
// beam[i][j] == beam[k][j]; its running count along j equals j + 1 exactly
// while the prefixes agree, and the first k where it does is the answer.
std::vector<int32_t> DedupPrefix(const Beams& beams) {
  const int32_t W = beams.width, L = beams.length;
  std::vector<int32_t> out(static_cast<size_t>(W) * L);
  for (int32_t i = 0; i < W; ++i) {
    const int32_t* bi = beams.tokens.data() + static_cast<size_t>(i) * L;
    for (int32_t j = 0; j < L; ++j) out[i * L + j] = i;
    for (int32_t k = 0; k < i; ++k) {
      const int32_t* bk = beams.tokens.data() + static_cast<size_t>(k) * L;
      for (int32_t j = 0; j < L && bk[j] == bi[j]; ++j) {
        if (out[i * L + j] == i) out[i * L + j] = k;
      }
    }
  }
  return out;
}

absl::StatusOr<PackedBeams> PackBeams(int32_t root_token, const Beams& beams) {
  TS_RETURN_IF_ERROR(beams.Validate());
  if (root_token < 0) {
    return absl::InvalidArgumentError(absl::StrCat("root token ", root_token, " is negative"));
  }
  const int32_t W = beams.width, L = beams.length;
  const std::vector<int32_t> prefix = DedupPrefix(beams);
  PackedBeams out;
  out.tree = TokenTree::Root(root_token);
  out.node_log_probs = {0.0f};
  out.beam_nodes.assign(static_cast<size_t>(W) * L, -1);
  for (int32_t j = 0; j < L; ++j) {
    for (int32_t i = 0; i < W; ++i) {
      const int32_t first = prefix[i * L + j];
      if (first != i) {  // an earlier candidate already holds this prefix
        out.beam_nodes[i * L + j] = out.beam_nodes[first * L + j];
        continue;
      }
      const int32_t parent = j == 0 ? 0 : out.beam_nodes[i * L + j - 1];
      out.beam_nodes[i * L + j] = out.tree.AddNode(parent, beams.tokens[i * L + j]);
      out.node_log_probs.push_back(beams.log_probs.empty() ? 0.0f : beams.log_probs[i * L + j]);
    }
  }
  return out;
}

}  // namespace treespec
