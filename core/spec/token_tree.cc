#include "core/spec/token_tree.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status ValidateDraftDist(const SparseDist& q, int32_t node, int64_t vocab) {
  if (q.tokens.size() != q.probs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft[", node, "]: tokens has ", q.tokens.size(), " entries but probs has ",
        q.probs.size()));
  }
  double sum = 0.0;
  for (size_t j = 0; j < q.tokens.size(); ++j) {
    if (q.tokens[j] < 0 || q.tokens[j] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("draft[", node, "].tokens[", j, "] = ",
                                                     q.tokens[j], " is outside [0, ", vocab,
                                                     ")"));
    }
    if (!std::isfinite(q.probs[j]) || q.probs[j] < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft[", node, "].probs[", j, "] = ", q.probs[j], " is not a probability"));
    }
    sum += q.probs[j];
  }
  if (std::abs(sum - 1.0) > 1e-3) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft[", node, "].probs sum to ", sum, ", not 1"));
  }
  std::vector<int32_t> sorted = q.tokens;
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft[", node, "].tokens repeats token ", *dup));
  }
  return absl::OkStatus();
}

}  // namespace

TokenTree TokenTree::Root(int32_t root_token) {
  TokenTree t;
  t.tokens = {root_token};
  t.parents = {-1};
  return t;
}

TokenTree TokenTree::Chain(int32_t root_token, const std::vector<int32_t>& chain) {
  TokenTree t = Root(root_token);
  for (int32_t token : chain) t.AddNode(static_cast<int32_t>(t.tokens.size()) - 1, token);
  return t;
}

int32_t TokenTree::AddNode(int32_t parent, int32_t token) {
  tokens.push_back(token);
  parents.push_back(parent);
  if (!draft.empty()) draft.resize(tokens.size());
  return static_cast<int32_t>(tokens.size()) - 1;
}

absl::Status TokenTree::Validate(int64_t vocab) const {
  const int64_t n = num_nodes();
  if (n == 0) return absl::InvalidArgumentError("tokens is empty: a tree needs its root");
  if (n > kMaxTreeNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tree has ", n, " nodes, more than the limit of ", kMaxTreeNodes));
  }
  if (static_cast<int64_t>(parents.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("parents has ", parents.size(),
                                                   " entries but tokens has ", n));
  }
  if (!draft.empty() && static_cast<int64_t>(draft.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft has ", draft.size(), " entries; it must be empty or match tokens (", n, ")"));
  }
  if (parents[0] != -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parents[0] = ", parents[0], "; the root's parent must be -1"));
  }
  std::vector<int32_t> depth(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens[", i, "] = ", tokens[i], " is outside [0, ", vocab, ")"));
    }
    if (i == 0) continue;
    if (parents[i] < 0 || parents[i] >= i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parents[", i, "] = ", parents[i], "; a node's parent must be in [0, ", i, ")"));
    }
    depth[i] = depth[parents[i]] + 1;
    if (depth[i] > kMaxTreeDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", i, " has depth ", depth[i], ", more than the limit of ", kMaxTreeDepth));
    }
  }
  const std::vector<std::vector<int32_t>> children = ChildLists();
  for (int32_t v = 0; v < n; ++v) {
    std::vector<int32_t> child_tokens;
    for (int32_t c : children[v]) child_tokens.push_back(tokens[c]);
    std::sort(child_tokens.begin(), child_tokens.end());
    auto dup = std::adjacent_find(child_tokens.begin(), child_tokens.end());
    if (dup != child_tokens.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", v, " has two children with token ", *dup));
    }
    if (!has_draft(v)) continue;
    TS_RETURN_IF_ERROR(ValidateDraftDist(draft[v], v, vocab));
    for (int32_t c : children[v]) {
      if (!(draft[v].ProbOf(tokens[c]) > 0.0f)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokens[", c, "] = ", tokens[c], " has probability 0 in draft[", v,
                         "], the distribution its parent's children were sampled from"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<int32_t> TokenTree::Depths() const {
  std::vector<int32_t> depth(tokens.size(), 0);
  for (size_t i = 1; i < tokens.size(); ++i) depth[i] = depth[parents[i]] + 1;
  return depth;
}

std::vector<int32_t> TokenTree::Children(int32_t node) const {
  std::vector<int32_t> out;
  for (size_t i = node + 1; i < parents.size(); ++i) {
    if (parents[i] == node) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

std::vector<std::vector<int32_t>> TokenTree::ChildLists() const {
  std::vector<std::vector<int32_t>> out(tokens.size());
  for (size_t i = 1; i < parents.size(); ++i) {
    if (parents[i] >= 0 && parents[i] < static_cast<int32_t>(i)) {
      out[parents[i]].push_back(static_cast<int32_t>(i));
    }
  }
  return out;
}

std::vector<int32_t> TokenTree::PathTo(int32_t node) const {
  std::vector<int32_t> path;
  for (int32_t v = node; v >= 0; v = parents[v]) path.push_back(v);
  std::reverse(path.begin(), path.end());
  return path;
}

int32_t TokenTree::ChildWithToken(int32_t node, int32_t token) const {
  for (size_t i = node + 1; i < parents.size(); ++i) {
    if (parents[i] == node && tokens[i] == token) return static_cast<int32_t>(i);
  }
  return -1;
}

}  // namespace treespec
