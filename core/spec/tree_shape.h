// The shape of a draft tree, T = (N1, …, Nγ) of paper 000 Sec. 4.1: every
// node at level i-1 gets N_i children, so level i holds B_i = N1·…·Ni nodes
// and the draft length is γ. A chain of K tokens is (1, …, 1).
//
// Text forms: "3,2,2,1,1" and "chain:K" (the same as K ones). ToString() gives
// "chain:K" for all-ones shapes and the comma list otherwise, and Parse()
// reads it back. A value type; thread-safe for const use.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace treespec {

inline constexpr int kMaxShapeDepth = 16;      // levels γ
inline constexpr int64_t kMaxShapeNodes = 512;  // tree nodes, root included

class TreeShape {
 public:
  // INVALID_ARGUMENT naming the field `tree` and the bad value for empty input,
  // non-numbers, zeros, negatives, more than kMaxShapeDepth levels and more
  // than kMaxShapeNodes nodes.
  static absl::StatusOr<TreeShape> Parse(absl::string_view text);
  // Same limits, from the per-level child counts.
  static absl::StatusOr<TreeShape> FromFanouts(std::vector<int32_t> fanouts);
  static absl::StatusOr<TreeShape> Chain(int32_t length);

  const std::vector<int32_t>& fanouts() const { return fanouts_; }  // N1..Nγ
  int32_t Depth() const { return static_cast<int32_t>(fanouts_.size()); }  // γ
  std::vector<int64_t> LevelSizes() const;  // B1..Bγ
  int64_t NumDraftNodes() const;            // B1 + … + Bγ
  int64_t NumNodes() const { return 1 + NumDraftNodes(); }  // with the root
  bool IsChain() const;
  std::string ToString() const;

  friend bool operator==(const TreeShape& a, const TreeShape& b) {
    return a.fanouts_ == b.fanouts_;
  }
  friend bool operator!=(const TreeShape& a, const TreeShape& b) { return !(a == b); }

 private:
  explicit TreeShape(std::vector<int32_t> fanouts) : fanouts_(std::move(fanouts)) {}
  // Checks the limits; `text` is what error messages quote.
  static absl::StatusOr<TreeShape> Build(std::vector<int32_t> fanouts, absl::string_view text);
  std::vector<int32_t> fanouts_;
};

}  // namespace treespec
