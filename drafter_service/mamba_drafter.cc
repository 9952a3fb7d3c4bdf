#include "drafter_service/mamba_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<MambaDrafter>> MambaDrafter::Create(const DrafterOptions& options,
                                                                   Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto d = std::unique_ptr<MambaDrafter>(new MambaDrafter(options));
  TS_ASSIGN_OR_RETURN(d->model_, MambaModel::Load(options.model_dir, backend));
  TS_ASSIGN_OR_RETURN(d->pool_, MambaStatePool::Create(d->model_->config(),
                                                       options.max_sequences *
                                                           (1 + options.max_tree_nodes),
                                                       backend));
  return d;
}

absl::Status MambaDrafter::OpenSequence(uint64_t id, const std::vector<int32_t>& prompt) {
  Slots s;
  std::vector<int32_t> all;
  TS_RETURN_IF_ERROR(pool_->AllocateMany(1 + options_.max_tree_nodes, &all));
  s.base = all[0];
  s.nodes.assign(all.begin() + 1, all.end());
  if (!prompt.empty()) {
    std::vector<float> logits;
    absl::Status st = model_->Prefill(prompt, s.base, pool_.get(), &logits);
    if (!st.ok()) {
      for (int32_t slot : all) pool_->Free(slot);
      return st;
    }
  }
  slots_[id] = std::move(s);
  return absl::OkStatus();
}

void MambaDrafter::ReleaseSequence(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  pool_->Free(it->second.base);
  for (int32_t slot : it->second.nodes) pool_->Free(slot);
  slots_.erase(it);
}

void MambaDrafter::Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
                           std::vector<absl::Status>* status) {
  const int64_t V = vocab_size();
  logits->assign(items.size() * V, 0.0f);
  // Adopt the state of the deepest last-tree node on the accepted path.
  std::vector<std::vector<int32_t>> remaining(items.size());
  size_t rounds = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    Slots& s = slots_[items[k].id];
    const std::vector<int32_t>& toks = *items[k].new_tokens;
    size_t matched = 0;
    int32_t node = 0;
    if (items[k].last_tree->num_nodes() > 0) {
      while (matched + 1 < toks.size()) {
        int32_t child = items[k].last_tree->ChildWithToken(node, toks[matched]);
        if (child < 0) break;
        node = child;
        ++matched;
      }
    }
    if (node > 0) std::swap(s.base, s.nodes[node - 1]);
    remaining[k].assign(toks.begin() + matched, toks.end());
    rounds = std::max(rounds, remaining[k].size());
  }
  // Feed the rest (normally just the bonus token), one batched step per round.
  for (size_t r = 0; r < rounds; ++r) {
    std::vector<int32_t> tokens, slots;
    std::vector<size_t> who;
    for (size_t k = 0; k < items.size(); ++k) {
      if (r < remaining[k].size() && (*status)[k].ok()) {
        tokens.push_back(remaining[k][r]);
        slots.push_back(slots_[items[k].id].base);
        who.push_back(k);
      }
    }
    if (tokens.empty()) continue;
    std::vector<float> out;
    absl::Status st = model_->Step(tokens, slots, pool_.get(), &out);
    for (size_t w = 0; w < who.size(); ++w) {
      const size_t k = who[w];
      if (!st.ok()) {
        (*status)[k] = st;
      } else if (r + 1 == remaining[k].size()) {
        std::copy(out.begin() + w * V, out.begin() + (w + 1) * V, logits->begin() + k * V);
      }
    }
  }
}

absl::Status MambaDrafter::Expand(const std::vector<NodeFeed>& feeds,
                                  const std::map<uint64_t, TokenTree>& trees,
                                  std::vector<float>* logits) {
  std::vector<int32_t> src, dst, tokens;
  for (const NodeFeed& f : feeds) {
    Slots& s = slots_[f.id];
    if (f.node < 1 || f.node > static_cast<int32_t>(s.nodes.size())) {
      return absl::InternalError(absl::StrCat("mamba drafter: node ", f.node, " has no slot"));
    }
    src.push_back(f.parent == 0 ? s.base : s.nodes[f.parent - 1]);
    dst.push_back(s.nodes[f.node - 1]);
    tokens.push_back(f.token);
  }
  TS_RETURN_IF_ERROR(pool_->Copy(src, dst));
  return model_->Step(tokens, dst, pool_.get(), logits);
}

DrafterStats MambaDrafter::ModelStats() const {
  DrafterStats s;
  s.slots_total = pool_->num_slots();
  s.slots_free = pool_->num_free();
  return s;
}

}  // namespace treespec
