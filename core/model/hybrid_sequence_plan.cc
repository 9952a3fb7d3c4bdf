// HybridSequenceModel::PlanForward: checks a Forward batch before anything
// changes and lays out its Mamba-2 side (SsmPass): the tree nodes of earlier
// calls that new nodes descend from (read back from the activation cache),
// then the new tokens in packed order, each row's parent row, the slots of
// the committed states, where chains leave their final state and which
// cache rows keep the new tokens' activations.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/model/hybrid_sequence_model.h"
#include "core/spec/tree_packing.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

void AddRow(SsmTreeBatch* b, int32_t parent_row, int32_t slot) {
  b->parent.push_back(parent_row);
  b->slot.push_back(slot);
}

}  // namespace

absl::Status HybridSequenceModel::CheckForwardSeq(const ForwardSeq& fs, const Seq& s) const {
  const char* kind = ModelKindName(info_.kind);
  for (int32_t t : fs.tokens) {
    if (t < 0 || t >= info_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is outside the vocabulary [0, ",
                                                     info_.vocab_size, ")"));
    }
  }
  const int64_t n = static_cast<int64_t>(fs.tokens.size()), total = fs.num_prior + n;
  if (kv_ != nullptr && s.length + total > kv_->capacity(s.kv)) {
    return absl::OutOfRangeError(absl::StrCat(kind, ": ", total, " tail tokens after ", s.length,
                                              " exceed the capacity ", kv_->capacity(s.kv),
                                              " the sequence was opened with"));
  }
  if (fs.parents.empty()) {
    if (fs.num_prior == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        kind, ": a chain cannot follow ", fs.num_prior, " tail nodes (num_prior must be 0)"));
  }
  if (fs.num_prior < 0 || static_cast<int64_t>(fs.parents.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("tree: ", fs.parents.size(), " parents for ",
                                                   fs.num_prior, " prior + ", n, " new nodes"));
  }
  if (total > max_tail_nodes_) {
    return absl::InvalidArgumentError(absl::StrCat("tree of ", total, " nodes exceeds this model's ",
                                                   max_tail_nodes_, " tail nodes per sequence"));
  }
  PackedTree packed;
  TS_RETURN_IF_ERROR(PackTree(fs.parents, &packed));
  if (fs.num_prior > 0 &&
      (static_cast<int32_t>(s.parents.size()) < fs.num_prior ||
       !std::equal(s.parents.begin(), s.parents.begin() + fs.num_prior, fs.parents.begin()))) {
    return absl::FailedPreconditionError(absl::StrCat(
        kind, ": the ", fs.num_prior, " prior nodes were not written by an earlier tree pass"));
  }
  return absl::OkStatus();
}

absl::Status HybridSequenceModel::PlanForward(const std::vector<ForwardSeq>& seqs,
                                              std::vector<Seq*>* state, SsmPass* pass) {
  std::set<int64_t> seen;
  state->assign(seqs.size(), nullptr);
  for (size_t si = 0; si < seqs.size(); ++si) {
    TS_ASSIGN_OR_RETURN((*state)[si], Get(seqs[si].kv_seq));
    if (!seen.insert(seqs[si].kv_seq).second) {
      return absl::InvalidArgumentError(absl::StrCat(ModelKindName(info_.kind), ": sequence ",
                                                     seqs[si].kv_seq,
                                                     " appears twice in one forward pass"));
    }
    TS_RETURN_IF_ERROR(CheckForwardSeq(seqs[si], *(*state)[si]));
  }
  // Rows of prior nodes that new nodes descend from, first.
  SsmTreeBatch& b = pass->batch;
  std::vector<std::vector<int32_t>> row_of(seqs.size());
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& fs = seqs[si];
    const Seq& s = *(*state)[si];
    if (fs.num_prior == 0) continue;
    std::vector<bool> needed(fs.num_prior, false);
    for (size_t i = fs.num_prior; i < fs.parents.size(); ++i) {
      for (int32_t p = fs.parents[i]; p >= 0 && p < fs.num_prior && !needed[p]; p = fs.parents[p]) {
        needed[p] = true;
      }
    }
    row_of[si].assign(fs.num_prior, -1);
    for (int32_t node = 0; node < fs.num_prior; ++node) {
      if (!needed[node]) continue;
      const int32_t p = fs.parents[node];
      row_of[si][node] = b.num_rows();
      AddRow(&b, p < 0 ? -1 : row_of[si][p], s.base);
      pass->prior_rows.push_back(CacheRow(s, node));
    }
  }
  // Then every new token, in packed order.
  int32_t t = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& fs = seqs[si];
    const Seq& s = *(*state)[si];
    const int32_t n = static_cast<int32_t>(fs.tokens.size()), first = b.num_rows();
    for (int32_t i = 0; i < n; ++i) {
      int32_t parent_row = i == 0 ? -1 : first + i - 1;
      if (!fs.parents.empty()) {
        const int32_t p = fs.parents[fs.num_prior + i];
        parent_row = p < 0 ? -1 : (p >= fs.num_prior ? first + p - fs.num_prior : row_of[si][p]);
      }
      AddRow(&b, parent_row, s.base);
    }
    if (fs.parents.empty() && n > 0) {
      b.out_rows.push_back(first + n - 1);
      b.out_slots.push_back(s.scratch);
    }
    if (n > 0 && fs.num_prior + n <= max_tail_nodes_) {
      pass->keep.push_back({t, n, CacheRow(s, fs.num_prior)});
    }
    t += n;
  }
  return b.Plan(pool_->num_slots());
}

}  // namespace treespec
