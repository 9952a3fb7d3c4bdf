#include "core/model/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::Status KvCacheOptions::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError("kv cache: layers, heads and head_dim must be positive");
  }
  if (block_size <= 0 || block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: block_size ", block_size,
                                                   " must be in [1, 1024]"));
  }
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: num_blocks ", num_blocks,
                                                   " must be positive"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvCacheOptions& options,
                                                                   Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto cache = std::unique_ptr<PagedKvCache>(new PagedKvCache(options, backend));
  const int64_t slots = options.num_blocks * options.block_size;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    TS_ASSIGN_OR_RETURN(Tensor k, backend->Alloc(backend->activation_dtype(),
                                                 {slots, options.num_kv_heads, options.head_dim}));
    TS_ASSIGN_OR_RETURN(Tensor v, backend->Alloc(backend->activation_dtype(),
                                                 {slots, options.num_kv_heads, options.head_dim}));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  for (int64_t b = options.num_blocks - 1; b >= 0; --b) cache->free_.push_back(static_cast<int32_t>(b));
  return cache;
}

int64_t PagedKvCache::CreateSequence() {
  int64_t id = next_id_++;
  seqs_[id] = Seq{};
  return id;
}

absl::StatusOr<PagedKvCache::Seq*> PagedKvCache::Get(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("kv cache: no sequence ", seq));
  }
  return &it->second;
}

absl::Status PagedKvCache::Reserve(int64_t seq, int64_t total_len) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(seq));
  const int64_t need_blocks = (total_len + options_.block_size - 1) / options_.block_size;
  const int64_t extra = need_blocks - static_cast<int64_t>(s->blocks.size());
  if (extra <= 0) return absl::OkStatus();
  if (extra > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache full: sequence needs ", extra, " more blocks of ", options_.block_size,
        " tokens, ", free_.size(), " of ", options_.num_blocks, " free"));
  }
  for (int64_t i = 0; i < extra; ++i) {
    s->blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

int64_t PagedKvCache::length(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

int64_t PagedKvCache::capacity(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0
                           : static_cast<int64_t>(it->second.blocks.size()) * options_.block_size;
}

absl::Status PagedKvCache::Commit(int64_t seq, int64_t n) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(seq));
  if (n < 0 || s->length + n > capacity(seq)) {
    return absl::InternalError(absl::StrCat("kv cache: commit of ", n, " tokens beyond capacity"));
  }
  s->length += n;
  return absl::OkStatus();
}

absl::Status PagedKvCache::CommitPath(int64_t seq, const std::vector<int32_t>& path) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(seq));
  std::vector<int32_t> src, dst;
  for (size_t k = 0; k < path.size(); ++k) {
    if (path[k] < static_cast<int32_t>(k) || (k > 0 && path[k] <= path[k - 1]) ||
        s->length + path[k] >= capacity(seq)) {
      return absl::InternalError("kv cache: path must be strictly increasing within capacity");
    }
    if (path[k] == static_cast<int32_t>(k)) continue;
    auto slot = [&](int64_t pos) {
      return s->blocks[pos / options_.block_size] * static_cast<int32_t>(options_.block_size) +
             static_cast<int32_t>(pos % options_.block_size);
    };
    src.push_back(slot(s->length + path[k]));
    dst.push_back(slot(s->length + static_cast<int64_t>(k)));
  }
  if (!src.empty()) {
    for (int64_t l = 0; l < options_.num_layers; ++l) {
      TS_RETURN_IF_ERROR(backend_->CopyRows(&k_[l], src, dst));
      TS_RETURN_IF_ERROR(backend_->CopyRows(&v_[l], src, dst));
    }
  }
  s->length += static_cast<int64_t>(path.size());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PagedKvCache::Fork(int64_t seq, const std::vector<int32_t>& path,
                                           int64_t capacity) {
  TS_ASSIGN_OR_RETURN(Seq * s, Get(seq));
  const int64_t len = s->length;
  const int64_t cap = this->capacity(seq);
  for (size_t k = 0; k < path.size(); ++k) {
    if (path[k] < static_cast<int32_t>(k) || (k > 0 && path[k] <= path[k - 1]) ||
        len + path[k] >= cap) {
      return absl::InvalidArgumentError("kv cache: fork path must be strictly increasing within capacity");
    }
  }
  const int64_t total = len + static_cast<int64_t>(path.size());
  if (capacity < total) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: fork capacity ", capacity,
                                                   " below the ", total, " tokens it holds"));
  }
  const int64_t fork = CreateSequence();
  if (absl::Status st = Reserve(fork, capacity); !st.ok()) {
    Release(fork);
    return st;
  }
  const Seq& from = seqs_.at(seq);  // Reserve may have rehashed the map
  Seq& to = seqs_.at(fork);
  const int64_t bs = options_.block_size;
  auto slot = [bs](const Seq& q, int64_t pos) {
    return q.blocks[pos / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(pos % bs);
  };
  std::vector<int32_t> src, dst;
  src.reserve(total);
  dst.reserve(total);
  for (int64_t p = 0; p < len; ++p) {
    src.push_back(slot(from, p));
    dst.push_back(slot(to, p));
  }
  for (size_t k = 0; k < path.size(); ++k) {
    src.push_back(slot(from, len + path[k]));
    dst.push_back(slot(to, len + static_cast<int64_t>(k)));
  }
  if (!src.empty()) {
    for (int64_t l = 0; l < options_.num_layers; ++l) {
      absl::Status st = backend_->CopyRows(&k_[l], src, dst);
      if (st.ok()) st = backend_->CopyRows(&v_[l], src, dst);
      if (!st.ok()) {
        Release(fork);
        return st;
      }
    }
  }
  to.length = total;
  return fork;
}

void PagedKvCache::Release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.blocks) free_.push_back(b);
  seqs_.erase(it);
}

absl::StatusOr<AttentionBatch> PagedKvCache::BuildBatch(const std::vector<int64_t>& seqs,
                                                        const std::vector<int>& num_new,
                                                        const std::vector<int>& num_prior) const {
  AttentionBatch batch;
  batch.num_seqs = static_cast<int>(seqs.size());
  batch.block_size = static_cast<int>(options_.block_size);
  batch.query_start.push_back(0);
  std::vector<const Seq*> rows;
  int width = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto it = seqs_.find(seqs[i]);
    if (it == seqs_.end()) {
      return absl::NotFoundError(absl::StrCat("kv cache: no sequence ", seqs[i]));
    }
    const Seq& s = it->second;
    if (s.length + num_prior[i] + num_new[i] > capacity(seqs[i])) {
      return absl::InternalError(absl::StrCat("kv cache: ", num_new[i],
                                              " new tokens exceed the reserved capacity"));
    }
    rows.push_back(&s);
    width = std::max(width, static_cast<int>(s.blocks.size()));
    batch.context_lens.push_back(static_cast<int32_t>(s.length));
    batch.prior_lens.push_back(num_prior[i]);
    batch.query_start.push_back(batch.query_start.back() + num_new[i]);
    batch.mask_offset.push_back(-1);
  }
  batch.max_blocks_per_seq = width;
  batch.block_tables.assign(seqs.size() * width, -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i]->blocks.begin(), rows[i]->blocks.end(),
              batch.block_tables.begin() + i * width);
  }
  return batch;
}

}  // namespace treespec
