#include "core/model/mamba_sequence_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/spec/sampling.h"
#include "core/spec/tree_packing.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<MambaSequenceModel>> MambaSequenceModel::Create(
    std::unique_ptr<MambaModel> model, int64_t max_sequences, int64_t max_tail_nodes) {
  if (max_sequences < 1 || max_tail_nodes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("mamba: max_sequences ", max_sequences,
                                                   " and max_tail_nodes ", max_tail_nodes,
                                                   " must be positive"));
  }
  auto m = std::unique_ptr<MambaSequenceModel>(new MambaSequenceModel());
  TS_ASSIGN_OR_RETURN(m->pool_, MambaStatePool::Create(model->config(),
                                                       max_sequences * (2 + max_tail_nodes),
                                                       model->backend()));
  const MambaConfig& c = model->config();
  m->info_.kind = ModelKind::kMamba;
  m->info_.vocab_size = c.vocab_size;
  m->info_.hidden_size = c.hidden_size;
  m->info_.num_layers = c.num_layers;
  m->info_.is_recurrent = true;
  m->max_sequences_ = max_sequences;
  m->max_tail_nodes_ = max_tail_nodes;
  m->model_ = std::move(model);
  return m;
}

absl::StatusOr<MambaSequenceModel::Seq*> MambaSequenceModel::Get(int64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("mamba: no sequence ", handle));
  return &it->second;
}

absl::StatusOr<int64_t> MambaSequenceModel::Open(int64_t capacity) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", capacity, " must be positive"));
  }
  std::vector<int32_t> slots;
  if (absl::Status st = pool_->AllocateMany(2 + max_tail_nodes_, &slots); !st.ok()) {
    for (int32_t s : slots) pool_->Free(s);
    return st;
  }
  Seq s;
  s.base = slots[0];
  s.scratch = slots[1];
  s.nodes.assign(slots.begin() + 2, slots.end());
  const int64_t id = next_id_++;
  seqs_[id] = std::move(s);
  return id;
}

absl::Status MambaSequenceModel::PlanTree(const ForwardSeq& fs, size_t si, Seq* s,
                                          std::vector<std::vector<Feed>>* rounds,
                                          int32_t* num_rows) {
  const int32_t n = static_cast<int32_t>(fs.tokens.size()), prior = fs.num_prior;
  const int32_t total = prior + n;
  std::vector<int32_t> round(total, -1);
  for (int32_t i = prior; i < total; ++i) {
    const int32_t p = fs.parents[i];
    round[i] = p < prior ? 0 : round[p] + 1;
    if (round[i] >= static_cast<int32_t>(rounds->size())) rounds->resize(round[i] + 1);
    int32_t row = -1;
    if (fs.logits == LogitsMode::kAll) row = i - prior;
    if (fs.logits == LogitsMode::kLast && i == total - 1) row = 0;
    (*rounds)[round[i]].push_back(
        {p < 0 ? s->base : s->nodes[p], s->nodes[i], fs.tokens[i - prior], si, row});
  }
  *num_rows = fs.logits == LogitsMode::kAll ? n : (fs.logits == LogitsMode::kLast && n > 0);
  s->parents = fs.parents;
  s->chain = 0;
  return absl::OkStatus();
}

absl::Status MambaSequenceModel::RunRound(const std::vector<Feed>& feeds,
                                          std::vector<std::vector<float>>* rows_of_seq) {
  if (feeds.empty()) return absl::OkStatus();
  const int64_t V = info_.vocab_size;
  std::vector<int32_t> src, dst, tokens;
  for (const Feed& f : feeds) {
    src.push_back(f.src);
    dst.push_back(f.dst);
    tokens.push_back(f.token);
  }
  TS_RETURN_IF_ERROR(pool_->Copy(src, dst));
  std::vector<float> logits;
  TS_RETURN_IF_ERROR(model_->Step(tokens, dst, pool_.get(), &logits));
  for (size_t k = 0; k < feeds.size(); ++k) {
    if (feeds[k].row < 0) continue;
    std::copy(logits.begin() + k * V, logits.begin() + (k + 1) * V,
              (*rows_of_seq)[feeds[k].seq].begin() + feeds[k].row * V);
  }
  return absl::OkStatus();
}

absl::Status MambaSequenceModel::CheckForward(const std::vector<ForwardSeq>& seqs,
                                              std::vector<Seq*>* state) {
  const int64_t V = info_.vocab_size;
  state->assign(seqs.size(), nullptr);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& fs = seqs[si];
    TS_ASSIGN_OR_RETURN((*state)[si], Get(fs.kv_seq));
    for (int32_t t : fs.tokens) {
      if (t < 0 || t >= V) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", t, " is outside the vocabulary [0, ", V, ")"));
      }
    }
    if (fs.parents.empty()) {
      if (fs.num_prior != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mamba: a chain cannot follow ", fs.num_prior, " tail nodes (num_prior must be 0)"));
      }
      continue;
    }
    const int64_t total = static_cast<int64_t>(fs.num_prior) + static_cast<int64_t>(fs.tokens.size());
    if (fs.num_prior < 0 || static_cast<int64_t>(fs.parents.size()) != total) {
      return absl::InvalidArgumentError(absl::StrCat("tree: ", fs.parents.size(), " parents for ",
                                                     fs.num_prior, " prior + ", fs.tokens.size(),
                                                     " new nodes"));
    }
    if (total > max_tail_nodes_) {
      return absl::InvalidArgumentError(absl::StrCat("tree of ", total, " nodes exceeds this model's ",
                                                     max_tail_nodes_, " tail nodes per sequence"));
    }
    PackedTree packed;
    TS_RETURN_IF_ERROR(PackTree(fs.parents, &packed));
    const std::vector<int32_t>& had = (*state)[si]->parents;
    if (fs.num_prior > 0 &&
        (static_cast<int32_t>(had.size()) < fs.num_prior ||
         !std::equal(had.begin(), had.begin() + fs.num_prior, fs.parents.begin()))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "mamba: the ", fs.num_prior, " prior nodes were not written by an earlier tree pass"));
    }
  }
  return absl::OkStatus();
}

absl::Status MambaSequenceModel::Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                                         const ForwardOptions& options) {
  if (!options.hidden_layers.empty()) {
    return absl::UnimplementedError("mamba: hidden states of layers are not available");
  }
  const int64_t V = info_.vocab_size;
  // Everything is checked before any state changes.
  std::vector<Seq*> state;
  TS_RETURN_IF_ERROR(CheckForward(seqs, &state));
  std::vector<std::vector<float>> rows(seqs.size());
  std::vector<int32_t> num_rows(seqs.size(), 0);
  std::vector<std::vector<Feed>> rounds(1);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& fs = seqs[si];
    Seq* s = state[si];
    const int32_t n = static_cast<int32_t>(fs.tokens.size());
    if (!fs.parents.empty()) {
      TS_RETURN_IF_ERROR(PlanTree(fs, si, s, &rounds, &num_rows[si]));
      rows[si].assign(num_rows[si] * V, 0.0f);
      continue;
    }
    s->chain = n;
    s->parents.clear();
    if (n == 0) continue;
    num_rows[si] = fs.logits == LogitsMode::kAll ? n : fs.logits == LogitsMode::kLast;
    rows[si].assign(num_rows[si] * V, 0.0f);
    if (n == 1) {  // batched with the other one-token feeds
      rounds[0].push_back({s->base, s->scratch, fs.tokens[0], si, num_rows[si] > 0 ? 0 : -1});
      continue;
    }
    TS_RETURN_IF_ERROR(pool_->Copy({s->base}, {s->scratch}));
    std::vector<float> logits;
    TS_RETURN_IF_ERROR(model_->Prefill(fs.tokens, s->scratch, pool_.get(), &logits,
                                       fs.logits == LogitsMode::kAll));
    if (num_rows[si] > 0) rows[si] = std::move(logits);
  }
  for (const std::vector<Feed>& round : rounds) TS_RETURN_IF_ERROR(RunRound(round, &rows));
  out->vocab_size = V;
  out->hidden_size = info_.hidden_size;
  out->hidden.clear();
  out->hidden_row_start.assign(seqs.size() + 1, 0);  // no hidden states (Mamba targets)
  out->logits.clear();
  out->row_start.assign(1, 0);
  for (size_t si = 0; si < seqs.size(); ++si) {
    out->logits.insert(out->logits.end(), rows[si].begin(), rows[si].end());
    out->row_start.push_back(out->row_start.back() + num_rows[si]);
  }
  out->argmax.clear();
  if (options.argmax_only) {
    for (int32_t r = 0; r < out->row_start.back(); ++r) {
      out->argmax.push_back(Argmax(out->row_logits(r), V));
    }
    out->logits.clear();
  }
  return absl::OkStatus();
}

absl::Status MambaSequenceModel::Commit(int64_t handle, int64_t n) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  if (n == 0) return absl::OkStatus();
  if (s->chain != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mamba: commit of ", n, " tokens, but the tail is a chain of ", s->chain,
        " (a recurrent state is committed whole)"));
  }
  std::swap(s->base, s->scratch);
  s->length += n;
  s->chain = 0;
  return absl::OkStatus();
}

absl::Status MambaSequenceModel::CommitPath(int64_t handle, const std::vector<int32_t>& path) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  if (path.empty()) return absl::OkStatus();
  if (s->chain > 0) {
    for (size_t k = 0; k < path.size(); ++k) {
      if (path[k] != static_cast<int32_t>(k) || path.size() != static_cast<size_t>(s->chain)) {
        return absl::FailedPreconditionError("mamba: a chain tail is committed whole");
      }
    }
    return Commit(handle, s->chain);
  }
  const int32_t total = static_cast<int32_t>(s->parents.size());
  for (size_t k = 0; k < path.size(); ++k) {
    const int32_t want_parent = k == 0 ? -1 : path[k - 1];
    if (path[k] < 0 || path[k] >= total || s->parents[path[k]] != want_parent) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mamba: path[", k, "] = ", path[k], " is not a root-to-node path of the tail tree"));
    }
  }
  std::swap(s->base, s->nodes[path.back()]);
  s->length += static_cast<int64_t>(path.size());
  s->parents.clear();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MambaSequenceModel::ForkPath(int64_t handle,
                                                     const std::vector<int32_t>& path,
                                                     int64_t capacity) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  int32_t src = s->base;
  if (!path.empty()) {
    const int32_t total = static_cast<int32_t>(s->parents.size());
    for (size_t k = 0; k < path.size(); ++k) {
      const int32_t want_parent = k == 0 ? -1 : path[k - 1];
      if (s->chain > 0 || path[k] < 0 || path[k] >= total || s->parents[path[k]] != want_parent) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mamba: fork path[", k, "] = ", path[k], " is not a root-to-node path of the tail tree"));
      }
    }
    src = s->nodes[path.back()];
  }
  const int64_t length = s->length + static_cast<int64_t>(path.size());
  TS_ASSIGN_OR_RETURN(const int64_t fork, Open(capacity));
  Seq& f = seqs_.at(fork);
  if (absl::Status st = pool_->Copy({src}, {f.base}); !st.ok()) {
    Release(fork);
    return st;
  }
  f.length = length;
  return fork;
}

void MambaSequenceModel::Release(int64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return;
  pool_->Free(it->second.base);
  pool_->Free(it->second.scratch);
  for (int32_t slot : it->second.nodes) pool_->Free(slot);
  seqs_.erase(it);
}

int64_t MambaSequenceModel::length(int64_t handle) const {
  auto it = seqs_.find(handle);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::StatusOr<SequenceSnapshot> MambaSequenceModel::SnapshotState(int64_t handle) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  TS_ASSIGN_OR_RETURN(MambaStateSnapshot snap, pool_->Snapshot(s->base));
  SequenceSnapshot out;
  out.data = std::move(snap.conv);
  out.data.insert(out.data.end(), snap.ssm.begin(), snap.ssm.end());
  return out;
}

absl::Status MambaSequenceModel::RestoreState(int64_t handle, const SequenceSnapshot& snapshot) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  const MambaConfig& c = model_->config();
  const size_t conv = static_cast<size_t>(c.num_layers * c.intermediate_size * c.conv_kernel);
  const size_t ssm = static_cast<size_t>(c.num_layers * c.intermediate_size * c.state_size);
  if (snapshot.data.size() != conv + ssm) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot of ", snapshot.data.size(),
                                                   " values; this model's state has ", conv + ssm));
  }
  MambaStateSnapshot snap;
  snap.conv.assign(snapshot.data.begin(), snapshot.data.begin() + conv);
  snap.ssm.assign(snapshot.data.begin() + conv, snapshot.data.end());
  s->chain = 0;
  s->parents.clear();
  return pool_->Restore(s->base, snap);
}

absl::Status MambaSequenceModel::CopyState(int64_t src, int64_t dst) {
  TS_ASSIGN_OR_RETURN(Seq * from, Get(src));
  TS_ASSIGN_OR_RETURN(Seq * to, Get(dst));
  TS_RETURN_IF_ERROR(pool_->Copy({from->base}, {to->base}));
  to->length = from->length;
  to->chain = 0;
  to->parents.clear();
  return absl::OkStatus();
}

SequenceModelStats MambaSequenceModel::stats() const {
  SequenceModelStats s;
  s.num_sequences = static_cast<int64_t>(seqs_.size());
  s.blocks_free = pool_->num_free();
  s.blocks_used = pool_->num_slots() - s.blocks_free;
  s.block_size = 0;
  return s;
}

}  // namespace treespec
