#include "drafter_service/ngram_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

// Hash of tokens[0..n) (read through `at`), distinct per length n.
template <typename At>
uint64_t NgramKey(int32_t n, At at) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(n);
  for (int32_t j = 0; j < n; ++j) {
    h ^= static_cast<uint32_t>(at(j));
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

}  // namespace

void NgramIndex::Append(int32_t token) {
  const int64_t pos = static_cast<int64_t>(history_.size());
  // Every n-gram ending just before `pos` is followed by `token`.
  for (int32_t n = min_n_; n <= max_n_ && n <= pos; ++n) {
    const int32_t* gram = history_.data() + pos - n;
    std::vector<Follower>& f = followers_[NgramKey(n, [&](int32_t j) { return gram[j]; })];
    auto it = std::find_if(f.begin(), f.end(), [&](const Follower& x) { return x.token == token; });
    if (it == f.end()) {
      f.push_back({token, 1, pos});
    } else {
      ++it->count;
      it->last_pos = pos;
    }
  }
  history_.push_back(token);
}

std::vector<NgramIndex::Continuation> NgramIndex::Lookup(const std::vector<int32_t>& path,
                                                        int limit, int32_t* match_len) const {
  if (match_len != nullptr) *match_len = 0;
  std::vector<Continuation> out;
  const int64_t total = static_cast<int64_t>(history_.size() + path.size());
  const int32_t longest = static_cast<int32_t>(std::min<int64_t>(max_n_, total));
  for (int32_t n = longest; n >= min_n_; --n) {
    const uint64_t key = NgramKey(n, [&](int32_t j) {
      const int64_t p = total - n + j;  // position in history ++ path
      return p < static_cast<int64_t>(history_.size())
                 ? history_[p]
                 : path[p - static_cast<int64_t>(history_.size())];
    });
    auto it = followers_.find(key);
    if (it == followers_.end()) continue;
    std::vector<Follower> f = it->second;
    std::sort(f.begin(), f.end(), [](const Follower& a, const Follower& b) {
      return a.count != b.count ? a.count > b.count : a.last_pos > b.last_pos;
    });
    for (int i = 0; i < static_cast<int>(f.size()) && i < limit; ++i) {
      out.push_back({f[i].token, f[i].count});
    }
    if (match_len != nullptr) *match_len = n;
    return out;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<NgramDrafter>> NgramDrafter::Create(const DrafterOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (options.vocab_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ngram drafter: --vocab-size ", options.vocab_size, " must be >= 1 (or give --model)"));
  }
  return std::unique_ptr<NgramDrafter>(new NgramDrafter(options));
}

TokenTree NgramDrafter::ProposeTree(const NgramIndex& index, const TreeShape& shape) {
  TokenTree tree = TokenTree::Root(index.history().back());
  std::vector<std::vector<int32_t>> paths = {{}};  // draft tokens below the root, per node
  std::vector<int32_t> frontier = {0};
  for (int32_t level = 0; level < shape.Depth() && !frontier.empty(); ++level) {
    std::vector<int32_t> next;
    for (int32_t parent : frontier) {
      for (const NgramIndex::Continuation& c :
           index.Lookup(paths[parent], shape.fanouts()[level])) {
        const int32_t node = tree.AddNode(parent, c.token);
        std::vector<int32_t> path = paths[parent];
        path.push_back(c.token);
        paths.push_back(std::move(path));
        next.push_back(node);
      }
    }
    frontier = std::move(next);
  }
  return tree;
}

std::vector<absl::Status> NgramDrafter::Open(const std::vector<DrafterOpenSpec>& specs) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> out;
  for (const DrafterOpenSpec& spec : specs) {
    absl::Status st = seqs_.CheckOpen(spec.id);
    if (st.ok()) st = ValidatePrompt(spec.prompt, vocab_size());
    if (st.ok()) {
      NgramIndex index(options_.ngram_min, options_.ngram_max);
      index.Append(spec.prompt);
      st = seqs_.Insert(spec.id, std::move(index));
    }
    out.push_back(st);
  }
  return out;
}

absl::Status NgramDrafter::CheckDraft(const DraftSpec& s, BatchIds* ids, NgramIndex** index) {
  TS_ASSIGN_OR_RETURN(*index, seqs_.Find(s.id));
  TS_RETURN_IF_ERROR(ids->Add(s.id));
  TS_RETURN_IF_ERROR(seqs_.CheckStep(s.id, s.step, "draft step", "drafted"));
  return ValidateDraftSpec(s, options_.max_tree_nodes, vocab_size());
}

std::vector<DraftOutcome> NgramDrafter::Draft(const std::vector<DraftSpec>& specs) {
  absl::MutexLock lock(&mu_);
  std::vector<DraftOutcome> out(specs.size());
  BatchIds ids;
  for (size_t i = 0; i < specs.size(); ++i) {
    const DraftSpec& s = specs[i];
    DraftOutcome& o = out[i];
    o.id = s.id;
    o.step = s.step;
    NgramIndex* index = nullptr;
    o.status = CheckDraft(s, &ids, &index);
    if (!o.status.ok()) continue;
    index->Append(s.new_tokens);
    o.tree = s.catch_up ? TokenTree::Root(s.new_tokens.back()) : ProposeTree(*index, s.shape);
    seqs_.AdvanceStep(s.id);
  }
  return out;
}

}  // namespace treespec
