#include "kernels/cuda/ssm_tree_layout.h"

#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace treespec::cuda {
namespace {

// Depth of every row below the committed state (a root is at depth 0).
std::vector<int32_t> Depths(const SsmTreeBatch& batch) {
  std::vector<int32_t> depth(batch.num_rows(), 0);
  for (int32_t r = 0; r < batch.num_rows(); ++r) {
    if (batch.parent[r] >= 0) depth[r] = depth[batch.parent[r]] + 1;
  }
  return depth;
}

std::vector<bool> HasChild(const SsmTreeBatch& batch) {
  std::vector<bool> has(batch.num_rows(), false);
  for (int32_t p : batch.parent) {
    if (p >= 0) has[p] = true;
  }
  return has;
}

bool IsAnchor(int32_t depth, int32_t chunk) { return depth % chunk == chunk - 1; }

}  // namespace

absl::Status CheckSsmTreeBatch(const char* op, const SsmTreeBatch& batch, int64_t R, int64_t S) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: ", op, ": ", what));
  };
  if (batch.num_rows() != R || batch.slot.size() != batch.parent.size() ||
      static_cast<int64_t>(batch.buffer.size()) != R ||
      batch.out_rows.size() != batch.out_slots.size()) {
    return bad(absl::StrCat("the batch (", batch.num_rows(), " rows) is not a planned batch of ",
                            R, " rows"));
  }
  std::unordered_set<int32_t> read;
  for (int32_t r = 0; r < batch.num_rows(); ++r) {
    const int32_t p = batch.parent[r], s = batch.slot[r];
    if (s < 0 || s >= S) {
      return bad(absl::StrCat("slot ", s, " of row ", r, " is not in [0, ", S, ")"));
    }
    if (p < -1 || p >= r || (p >= 0 && batch.slot[p] != s)) {
      return bad(absl::StrCat("parent of row ", r, " is ", p,
                              "; parents must precede their rows and share their slot"));
    }
    read.insert(s);
  }
  for (size_t i = 0; i < batch.out_rows.size(); ++i) {
    const int32_t row = batch.out_rows[i], s = batch.out_slots[i];
    if (row < 0 || row >= R || s < 0 || s >= S || read.count(s) > 0) {
      return bad(absl::StrCat("output ", i, " (row ", row, " into slot ", s,
                              ") needs a row of the batch and a slot in [0, ", S,
                              ") that no row reads"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::pair<int32_t, int32_t>> SsmTreeOutputs(const SsmTreeBatch& batch) {
  std::unordered_map<int32_t, size_t> last;  // slot -> its last output
  for (size_t i = 0; i < batch.out_slots.size(); ++i) last[batch.out_slots[i]] = i;
  std::vector<std::pair<int32_t, int32_t>> out;
  for (size_t i = 0; i < batch.out_slots.size(); ++i) {
    if (last[batch.out_slots[i]] == i) out.emplace_back(batch.out_rows[i], batch.out_slots[i]);
  }
  return out;
}

SsmConvLayout LayoutSsmTreeConv(const SsmTreeBatch& batch, int K) {
  SsmConvLayout l;
  const int32_t R = batch.num_rows();
  const std::vector<std::pair<int32_t, int32_t>> outs = SsmTreeOutputs(batch);
  l.num_rows = R;
  l.K = K;
  l.num_out = static_cast<int32_t>(outs.size());
  l.src = 0;
  l.slot = l.src + static_cast<int64_t>(R) * K;
  l.out_row = l.slot + R;
  l.out_slot = l.out_row + l.num_out;
  l.packed.resize(l.out_slot + l.num_out);
  for (int32_t r = 0; r < R; ++r) {
    // As kernels/cpu/ssm_tree_conv.cc: the row, its ancestors, then the
    // newest committed entries, filled newest (k = K - 1) first.
    int32_t j = r, from_state = K - 1;
    int32_t* src = l.packed.data() + l.src + static_cast<int64_t>(r) * K;
    for (int k = K - 1; k >= 0; --k) {
      if (j >= 0) {
        src[k] = j;
        j = batch.parent[j];
      } else {
        src[k] = -1 - from_state--;
      }
    }
    l.packed[l.slot + r] = batch.slot[r];
  }
  for (int32_t o = 0; o < l.num_out; ++o) {
    l.packed[l.out_row + o] = outs[o].first;
    l.packed[l.out_slot + o] = outs[o].second;
  }
  return l;
}

SsmScanLayout LayoutSsmTreeScanWithChunk(const SsmTreeBatch& batch, int32_t chunk) {
  SsmScanLayout l;
  const int32_t R = batch.num_rows(), Q = chunk;
  const std::vector<int32_t> depth = Depths(batch);
  const std::vector<bool> has_child = HasChild(batch);
  const std::vector<std::pair<int32_t, int32_t>> outs = SsmTreeOutputs(batch);
  std::vector<bool> is_out(R, false);
  for (const auto& o : outs) is_out[o.first] = true;
  std::vector<int32_t> state_of(R, -1), state_rows, start(R, -1), seg_off(R), seg_len(R);
  int64_t entries = 0;
  for (int32_t r = 0; r < R; ++r) {
    if ((IsAnchor(depth[r], Q) && has_child[r]) || is_out[r]) {
      state_of[r] = static_cast<int32_t>(state_rows.size());
      state_rows.push_back(r);
    }
    const int32_t p = batch.parent[r];
    if (p >= 0) start[r] = IsAnchor(depth[p], Q) ? state_of[p] : start[p];
    seg_len[r] = depth[r] % Q + 1;
    seg_off[r] = static_cast<int32_t>(entries);
    entries += seg_len[r];
  }
  l.num_rows = R;
  l.chunk = Q;
  l.num_states = static_cast<int32_t>(state_rows.size());
  l.num_out = static_cast<int32_t>(outs.size());
  l.num_entries = entries;
  l.parent = 0;
  l.slot = l.parent + R;
  l.seg_off = l.slot + R;
  l.seg_len = l.seg_off + R;
  l.start = l.seg_len + R;
  l.state_row = l.start + R;
  l.state_off = l.state_row + l.num_states;
  l.out_state = l.state_off + l.num_states;
  l.out_slot = l.out_state + l.num_out;
  l.packed.resize(l.out_slot + l.num_out);
  int32_t* p = l.packed.data();
  for (int32_t r = 0; r < R; ++r) {
    p[l.parent + r] = batch.parent[r];
    p[l.slot + r] = batch.slot[r];
    p[l.seg_off + r] = seg_off[r];
    p[l.seg_len + r] = seg_len[r];
    p[l.start + r] = start[r];
  }
  int64_t state_entries = 0;
  for (int32_t k = 0; k < l.num_states; ++k) {
    p[l.state_row + k] = state_rows[k];
    p[l.state_off + k] = static_cast<int32_t>(state_entries);
    state_entries += seg_len[state_rows[k]];
  }
  l.num_state_entries = state_entries;
  for (int32_t o = 0; o < l.num_out; ++o) {
    p[l.out_state + o] = state_of[outs[o].first];
    p[l.out_slot + o] = outs[o].second;
  }
  return l;
}

SsmScanLayout LayoutSsmTreeScan(const SsmTreeBatch& batch, int64_t state_floats,
                                int64_t state_budget_bytes) {
  const std::vector<int32_t> depth = Depths(batch);
  const std::vector<bool> has_child = HasChild(batch);
  const std::vector<std::pair<int32_t, int32_t>> outs = SsmTreeOutputs(batch);
  std::vector<bool> is_out(batch.num_rows(), false);
  for (const auto& o : outs) is_out[o.first] = true;
  int32_t chunk = kMinScanChunk;
  for (; chunk < kMaxScanChunk; chunk *= 2) {
    int64_t states = 0;
    for (int32_t r = 0; r < batch.num_rows(); ++r) {
      states += (IsAnchor(depth[r], chunk) && has_child[r]) || is_out[r];
    }
    if (states * state_floats * static_cast<int64_t>(sizeof(float)) <= state_budget_bytes) break;
  }
  return LayoutSsmTreeScanWithChunk(batch, chunk);
}

}  // namespace treespec::cuda
