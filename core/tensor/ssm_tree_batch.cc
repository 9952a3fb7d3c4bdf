#include "core/tensor/ssm_tree_batch.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace treespec {

int32_t SsmTreeBatch::AddSequence(int32_t state_slot, int32_t n,
                                  const std::vector<int32_t>& parents) {
  const int32_t first = num_rows();
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = parents.empty() ? i - 1 : parents[i];
    parent.push_back(p < 0 ? -1 : first + p);
    slot.push_back(state_slot);
  }
  return first;
}

absl::Status SsmTreeBatch::Plan(int64_t num_slots) {
  const int32_t R = num_rows();
  if (static_cast<int32_t>(slot.size()) != R || out_rows.size() != out_slots.size()) {
    return absl::InvalidArgumentError("ssm batch: parent, slot, out_rows and out_slots disagree");
  }
  std::unordered_set<int32_t> read;
  std::vector<int32_t> last_child(R, -1);
  for (int32_t r = 0; r < R; ++r) {
    const int32_t p = parent[r];
    if (p < -1 || p >= r || (p >= 0 && slot[p] != slot[r])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ssm batch: parent of row ", r, " is ", p, "; parents must precede their rows and "
          "share their state slot"));
    }
    if (slot[r] < 0 || slot[r] >= num_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("ssm batch: slot ", slot[r], " of row ", r, " is not in [0, ", num_slots, ")"));
    }
    read.insert(slot[r]);
    if (p >= 0) last_child[p] = r;
  }
  std::unordered_set<int32_t> out_row_seen, out_slot_seen;
  for (size_t i = 0; i < out_rows.size(); ++i) {
    if (!out_row_seen.insert(out_rows[i]).second || !out_slot_seen.insert(out_slots[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ssm batch: output ", i, " (row ", out_rows[i], " into slot ", out_slots[i],
          ") repeats a row or a slot of an earlier output; each is written once"));
    }
    if (out_rows[i] < 0 || out_rows[i] >= R || out_slots[i] < 0 || out_slots[i] >= num_slots ||
        read.count(out_slots[i]) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ssm batch: output ", i, " (row ", out_rows[i], " into slot ", out_slots[i],
          ") needs a row of the batch and a slot in [0, ", num_slots, ") that no row reads"));
    }
  }
  buffer.assign(R, -1);
  num_buffers = 0;
  std::vector<int32_t> free_buffers;
  for (int32_t r = 0; r < R; ++r) {
    const int32_t p = parent[r];
    if (p >= 0 && last_child[p] == r) {
      buffer[r] = buffer[p];
    } else if (!free_buffers.empty()) {
      buffer[r] = free_buffers.back();
      free_buffers.pop_back();
    } else {
      buffer[r] = num_buffers++;
    }
    if (last_child[r] < 0) free_buffers.push_back(buffer[r]);
  }
  return absl::OkStatus();
}

}  // namespace treespec
