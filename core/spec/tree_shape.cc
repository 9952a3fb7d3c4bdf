#include "core/spec/tree_shape.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace treespec {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("tree: \"", text, "\" is not a tree shape: ", why,
                   " (expected e.g. \"3,2,2,1,1\" or \"chain:4\")"));
}

// A positive decimal integer; rejects signs, fractions and exponents so that
// "+3", "3.0" and "1e2" are not silently accepted.
bool ParseCount(absl::string_view s, int64_t* out) {
  s = absl::StripAsciiWhitespace(s);
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(s, out);
}

}  // namespace

absl::StatusOr<TreeShape> TreeShape::FromFanouts(std::vector<int32_t> fanouts) {
  const std::string text = absl::StrJoin(fanouts, ",");
  return Build(std::move(fanouts), text);
}

absl::StatusOr<TreeShape> TreeShape::Build(std::vector<int32_t> fanouts, absl::string_view text) {
  if (fanouts.empty()) return Bad(text, "it has no levels");
  if (static_cast<int>(fanouts.size()) > kMaxShapeDepth) {
    return Bad(text, absl::StrCat(fanouts.size(), " levels is more than the limit of ",
                                  kMaxShapeDepth));
  }
  int64_t level = 1, nodes = 1;
  for (size_t i = 0; i < fanouts.size(); ++i) {
    if (fanouts[i] <= 0) {
      return Bad(text, absl::StrCat("level ", i + 1, " has ", fanouts[i],
                                    " children per node; each level needs at least 1"));
    }
    level *= fanouts[i];
    nodes += level;
    if (nodes > kMaxShapeNodes) {
      return Bad(text, absl::StrCat("it has more than ", kMaxShapeNodes,
                                    " nodes (root included) by level ", i + 1));
    }
  }
  return TreeShape(std::move(fanouts));
}

absl::StatusOr<TreeShape> TreeShape::Chain(int32_t length) {
  if (length <= 0) {
    return Bad(absl::StrCat("chain:", length), "a chain needs length >= 1");
  }
  if (length > kMaxShapeDepth) {
    return Bad(absl::StrCat("chain:", length),
               absl::StrCat("a chain is at most ", kMaxShapeDepth, " long"));
  }
  return FromFanouts(std::vector<int32_t>(length, 1));
}

absl::StatusOr<TreeShape> TreeShape::Parse(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (body.empty()) return Bad(text, "it is empty");
  int64_t value = 0;
  if (absl::ConsumePrefix(&body, "chain:")) {
    if (!ParseCount(body, &value)) {
      return Bad(text, "the chain length is not a positive integer");
    }
    if (value == 0 || value > kMaxShapeDepth) {
      return Bad(text, absl::StrCat("the chain length must be in [1, ", kMaxShapeDepth, "]"));
    }
    return Build(std::vector<int32_t>(value, 1), text);
  }
  std::vector<int32_t> fanouts;
  for (absl::string_view part : absl::StrSplit(body, ',')) {
    if (!ParseCount(part, &value)) {
      return Bad(text, absl::StrCat("\"", part, "\" is not a positive integer"));
    }
    if (value == 0) return Bad(text, "a level has 0 children");
    if (value > kMaxShapeNodes) {
      return Bad(text, absl::StrCat("it has more than ", kMaxShapeNodes, " nodes"));
    }
    fanouts.push_back(static_cast<int32_t>(value));
    if (static_cast<int>(fanouts.size()) > kMaxShapeDepth) {
      return Bad(text, absl::StrCat("it has more than ", kMaxShapeDepth, " levels"));
    }
  }
  return Build(std::move(fanouts), text);
}

std::vector<int64_t> TreeShape::LevelSizes() const {
  std::vector<int64_t> sizes;
  int64_t level = 1;
  for (int32_t n : fanouts_) {
    level *= n;
    sizes.push_back(level);
  }
  return sizes;
}

int64_t TreeShape::NumDraftNodes() const {
  int64_t total = 0;
  for (int64_t b : LevelSizes()) total += b;
  return total;
}

bool TreeShape::IsChain() const {
  for (int32_t n : fanouts_) {
    if (n != 1) return false;
  }
  return true;
}

std::string TreeShape::ToString() const {
  if (IsChain()) return absl::StrCat("chain:", fanouts_.size());
  return absl::StrJoin(fanouts_, ",");
}

}  // namespace treespec
