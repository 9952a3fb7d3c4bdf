#include "core/model/hybrid_sequence_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<HybridSequenceModel>> HybridSequenceModel::Create(
    std::unique_ptr<HybridModel> model, const SequenceModelOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto m = std::unique_ptr<HybridSequenceModel>(new HybridSequenceModel());
  m->max_sequences_ = options.max_sequences;
  m->max_tail_nodes_ = options.max_tail_nodes;
  Backend* be = model->backend();
  TS_ASSIGN_OR_RETURN(m->pool_, Mamba2StatePool::Create(model->StateDims(), 2 * options.max_sequences,
                                                        options.max_sequences * options.max_tail_nodes,
                                                        be));
  if (model->num_attention_layers() > 0) {
    TS_ASSIGN_OR_RETURN(m->kv_, PagedKvCache::Create(model->KvOptions(options.kv_blocks,
                                                                      options.kv_block_size),
                                                     be));
  }
  const HybridConfig& c = model->config();
  m->info_.kind = m->kv_ != nullptr ? ModelKind::kHybrid : ModelKind::kMamba2;
  m->info_.vocab_size = c.vocab_size;
  m->info_.hidden_size = c.hidden_size;
  m->info_.num_layers = c.num_layers;
  m->info_.is_recurrent = m->kv_ == nullptr;
  if (m->kv_ != nullptr) m->info_.max_positions = c.attn.MaxExactPosition();
  for (int64_t i = options.max_sequences - 1; i >= 0; --i) {
    m->free_indices_.push_back(static_cast<int32_t>(i));
  }
  m->model_ = std::move(model);
  return m;
}

absl::StatusOr<HybridSequenceModel::Seq*> HybridSequenceModel::Get(int64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat(ModelKindName(info_.kind), ": no sequence ", handle));
  }
  return &it->second;
}

absl::StatusOr<int64_t> HybridSequenceModel::Open(int64_t capacity) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", capacity, " must be positive"));
  }
  return OpenWith(capacity, -1);
}

absl::StatusOr<int64_t> HybridSequenceModel::OpenWith(int64_t capacity, int64_t kv) {
  if (free_indices_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(ModelKindName(info_.kind), ": all ",
                                                     max_sequences_, " sequences are open"));
  }
  Seq s;
  absl::StatusOr<int32_t> base = pool_->Allocate();
  absl::StatusOr<int32_t> scratch = base.ok() ? pool_->Allocate() : base;
  absl::Status st = scratch.status();
  if (st.ok() && kv_ != nullptr && kv < 0) {
    kv = kv_->CreateSequence();
    st = kv_->Reserve(kv, capacity);
    if (!st.ok()) kv_->Release(kv);
  }
  if (!st.ok()) {
    if (base.ok()) pool_->Free(*base);
    if (scratch.ok()) pool_->Free(*scratch);
    return st;
  }
  s.base = *base;
  s.scratch = *scratch;
  s.kv = kv;
  s.index = free_indices_.back();
  free_indices_.pop_back();
  const int64_t id = next_id_++;
  seqs_[id] = std::move(s);
  return id;
}

absl::Status HybridSequenceModel::Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                                          const ForwardOptions& options) {
  std::vector<Seq*> state;
  SsmPass pass;
  TS_RETURN_IF_ERROR(PlanForward(seqs, &state, &pass));
  // The pass overwrites these tails' cache rows and scratch slots; a failure
  // leaves them without a tail (committed states are never written).
  for (Seq* s : state) s->DropTail();
  if (kv_ != nullptr) {  // the model addresses sequences by their KV cache ids
    std::vector<ForwardSeq> by_kv = seqs;
    for (size_t si = 0; si < seqs.size(); ++si) by_kv[si].kv_seq = state[si]->kv;
    TS_RETURN_IF_ERROR(model_->Forward(by_kv, pass, kv_.get(), pool_.get(), out, options));
  } else {
    TS_RETURN_IF_ERROR(model_->Forward(seqs, pass, nullptr, pool_.get(), out, options));
  }
  for (size_t si = 0; si < seqs.size(); ++si) {
    const ForwardSeq& fs = seqs[si];
    Seq* s = state[si];
    if (fs.parents.empty()) {
      s->chain = static_cast<int64_t>(fs.tokens.size());
      s->chain_cached = s->chain <= max_tail_nodes_;
    } else {
      s->parents = fs.parents;
    }
  }
  return absl::OkStatus();
}

absl::Status HybridSequenceModel::CheckPath(const Seq& s, const std::vector<int32_t>& path) const {
  const int32_t total = s.chain > 0 ? static_cast<int32_t>(s.chain)
                                    : static_cast<int32_t>(s.parents.size());
  for (size_t k = 0; k < path.size(); ++k) {
    const bool in_tail = path[k] >= 0 && path[k] < total;
    // A chain's node i follows node i - 1.
    const int32_t parent = !in_tail ? -2 : s.chain > 0 ? path[k] - 1 : s.parents[path[k]];
    if (!in_tail || parent != (k == 0 ? -1 : path[k - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          ModelKindName(info_.kind), ": path[", k, "] = ", path[k],
          " is not a root-to-node path of the sequence's tail (", total, " nodes)"));
    }
  }
  return absl::OkStatus();
}

absl::Status HybridSequenceModel::StateAfter(const Seq& s, const std::vector<int32_t>& path,
                                             int32_t to) {
  const int64_t n = static_cast<int64_t>(path.size());
  if (n == 0) return pool_->Copy(s.base, to);
  if (s.chain > 0 && n == s.chain) return to == s.scratch ? absl::OkStatus() : pool_->Copy(s.scratch, to);
  if (s.chain > 0 && !s.chain_cached) {
    return absl::FailedPreconditionError(absl::StrCat(
        ModelKindName(info_.kind), ": a chain of ", s.chain, " tokens, longer than the ",
        max_tail_nodes_, " tail nodes whose activations are kept, is committed whole"));
  }
  std::vector<int32_t> rows;
  for (int32_t node : path) rows.push_back(CacheRow(s, node));
  return model_->Replay(rows, s.base, to, pool_.get());
}

absl::Status HybridSequenceModel::Commit(int64_t handle, int64_t n) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  if (n == 0) return absl::OkStatus();
  if (n < 0 || n > s->chain) {
    return absl::FailedPreconditionError(absl::StrCat(ModelKindName(info_.kind), ": commit of ", n,
                                                      " tokens, but the tail is a chain of ",
                                                      s->chain));
  }
  std::vector<int32_t> path(n);
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) path[i] = i;
  return CommitPath(handle, path);
}

absl::Status HybridSequenceModel::CommitPath(int64_t handle, const std::vector<int32_t>& path) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  if (path.empty()) return absl::OkStatus();
  TS_RETURN_IF_ERROR(CheckPath(*s, path));
  if (s->chain > 0 && static_cast<int64_t>(path.size()) < s->chain && !s->chain_cached) {
    return StateAfter(*s, path, s->scratch);  // FAILED_PRECONDITION, nothing changed
  }
  if (kv_ != nullptr) TS_RETURN_IF_ERROR(kv_->CommitPath(s->kv, path));
  absl::Status st = StateAfter(*s, path, s->scratch);
  s->length += static_cast<int64_t>(path.size());
  s->DropTail();
  if (!st.ok()) return st;
  std::swap(s->base, s->scratch);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HybridSequenceModel::ForkPath(int64_t handle,
                                                      const std::vector<int32_t>& path,
                                                      int64_t capacity) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  TS_RETURN_IF_ERROR(CheckPath(*s, path));
  if (s->chain > 0 && !path.empty() && static_cast<int64_t>(path.size()) < s->chain &&
      !s->chain_cached) {
    return absl::FailedPreconditionError(absl::StrCat(ModelKindName(info_.kind),
                                                      ": cannot fork inside an uncached chain"));
  }
  int64_t kv = -1;
  if (kv_ != nullptr) {
    TS_ASSIGN_OR_RETURN(kv, kv_->Fork(s->kv, path, capacity));
  }
  absl::StatusOr<int64_t> fork = OpenWith(capacity, kv);
  if (!fork.ok()) {
    if (kv >= 0) kv_->Release(kv);
    return fork.status();
  }
  Seq& f = seqs_.at(*fork);
  if (absl::Status st = StateAfter(*s, path, f.base); !st.ok()) {
    Release(*fork);
    return st;
  }
  f.length = s->length + static_cast<int64_t>(path.size());
  return *fork;
}

void HybridSequenceModel::Release(int64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return;
  pool_->Free(it->second.base);
  pool_->Free(it->second.scratch);
  if (kv_ != nullptr) kv_->Release(it->second.kv);
  free_indices_.push_back(it->second.index);
  seqs_.erase(it);
}

int64_t HybridSequenceModel::length(int64_t handle) const {
  auto it = seqs_.find(handle);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::StatusOr<std::vector<float>> HybridSequenceModel::CommittedState(int64_t handle) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  return pool_->Snapshot(s->base);
}

absl::StatusOr<SequenceSnapshot> HybridSequenceModel::SnapshotState(int64_t handle) {
  if (kv_ != nullptr) return SequenceModel::SnapshotState(handle);
  TS_ASSIGN_OR_RETURN(std::vector<float> data, CommittedState(handle));
  return SequenceSnapshot{std::move(data)};
}

absl::Status HybridSequenceModel::RestoreState(int64_t handle, const SequenceSnapshot& snapshot) {
  if (kv_ != nullptr) return SequenceModel::RestoreState(handle, snapshot);
  TS_ASSIGN_OR_RETURN(Seq * s, Get(handle));
  TS_RETURN_IF_ERROR(pool_->Restore(s->base, snapshot.data));
  s->DropTail();
  return absl::OkStatus();
}

absl::Status HybridSequenceModel::CopyState(int64_t src, int64_t dst) {
  if (kv_ != nullptr) return SequenceModel::CopyState(src, dst);
  TS_ASSIGN_OR_RETURN(Seq * from, Get(src));
  TS_ASSIGN_OR_RETURN(Seq * to, Get(dst));
  TS_RETURN_IF_ERROR(pool_->Copy(from->base, to->base));
  to->length = from->length;
  to->DropTail();
  return absl::OkStatus();
}

SequenceModelStats HybridSequenceModel::stats() const {
  SequenceModelStats s;
  s.num_sequences = static_cast<int64_t>(seqs_.size());
  if (kv_ != nullptr) {
    s.blocks_used = kv_->num_used_blocks();
    s.blocks_free = kv_->num_free_blocks();
    s.block_size = kv_->options().block_size;
  } else {  // in sequences' state slots, as Mamba counts
    s.blocks_used = s.num_sequences;
    s.blocks_free = static_cast<int64_t>(free_indices_.size());
  }
  return s;
}

}  // namespace treespec
