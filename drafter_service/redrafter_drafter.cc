#include "drafter_service/redrafter_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/spec/beam_tree.h"
#include "core/util/status_macros.h"
#include "drafter_service/redrafter_beam_search.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<RedrafterDrafter>> RedrafterDrafter::Create(
    const DrafterOptions& options, Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (options.kind != "redrafter") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kind ", options.kind, " is not redrafter"));
  }
  auto d = std::unique_ptr<RedrafterDrafter>(new RedrafterDrafter(options));
  TS_ASSIGN_OR_RETURN(d->head_, RedrafterHead::Load(options.model_dir, options.target_dir, backend));
  return d;
}

std::pair<int32_t, int32_t> RedrafterDrafter::FitBeams(const TreeShape& shape, int32_t beam_width,
                                                       int32_t beam_length) {
  const int32_t length = std::max(1, std::min(beam_length, shape.Depth()));
  const int64_t by_budget = shape.NumDraftNodes() / length;
  const int32_t width =
      static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(beam_width, by_budget)));
  return {width, length};
}

std::vector<absl::Status> RedrafterDrafter::Open(const std::vector<DrafterOpenSpec>& specs) {
  absl::MutexLock lock(&mu_);
  const int64_t H = head_->info().hidden_size;
  std::vector<absl::Status> out;
  for (const DrafterOpenSpec& spec : specs) {
    absl::Status st = seqs_.CheckOpen(spec.id);
    if (st.ok() && spec.prompt.empty()) st = absl::InvalidArgumentError("prompt is empty");
    if (st.ok()) st = ValidatePrompt(spec.prompt, vocab_size());
    const int64_t rows = static_cast<int64_t>(spec.prompt.size()) - 1;
    if (st.ok() && static_cast<int64_t>(spec.features.size()) != rows * H) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "features: ", spec.features.size(), " floats; a prompt of ", rows + 1, " tokens needs ",
          rows, " rows of ", H, " (the target's layer ", head_->info().target_layer, ")"));
    }
    if (st.ok()) st = seqs_.Insert(spec.id, RedrafterSeqState{});
    out.push_back(st);
  }
  return out;
}

absl::Status RedrafterDrafter::CheckDraft(const DraftSpec& s, BatchIds* ids) {
  TS_RETURN_IF_ERROR(seqs_.Find(s.id).status());
  TS_RETURN_IF_ERROR(ids->Add(s.id));
  TS_RETURN_IF_ERROR(seqs_.CheckStep(s.id, s.step, "draft step", "drafted"));
  TS_RETURN_IF_ERROR(ValidateDraftSpec(s, options_.max_tree_nodes, vocab_size()));
  const int64_t H = head_->info().hidden_size, n = static_cast<int64_t>(s.new_tokens.size());
  if (static_cast<int64_t>(s.features.size()) != n * H) {
    return absl::InvalidArgumentError(absl::StrCat("features: ", s.features.size(),
                                                   " floats for ", n,
                                                   " new tokens; redrafter needs ", n,
                                                   " rows of ", H));
  }
  return absl::OkStatus();
}

std::vector<DraftOutcome> RedrafterDrafter::Draft(const std::vector<DraftSpec>& specs) {
  absl::MutexLock lock(&mu_);
  const int64_t H = head_->info().hidden_size;
  std::vector<DraftOutcome> out(specs.size());
  BatchIds ids;
  std::vector<size_t> live;
  std::vector<float> last_features;
  for (size_t i = 0; i < specs.size(); ++i) {
    out[i].id = specs[i].id;
    out[i].step = specs[i].step;
    out[i].status = CheckDraft(specs[i], &ids);
    if (!out[i].status.ok()) continue;
    if (specs[i].catch_up) {  // the head keeps no history: nothing to consume
      out[i].tree = TokenTree::Root(specs[i].new_tokens.back());
      seqs_.AdvanceStep(specs[i].id);
      continue;
    }
    live.push_back(i);
    last_features.insert(last_features.end(), specs[i].features.end() - H,
                         specs[i].features.end());
  }
  if (live.empty()) return out;
  std::vector<float> h;
  absl::Status st = head_->Context(last_features, static_cast<int64_t>(live.size()), &h);
  std::vector<BeamRequest> requests;
  for (size_t k = 0; k < live.size(); ++k) {
    const DraftSpec& s = specs[live[k]];
    const auto [width, length] = FitBeams(s.shape, options_.beam_width, options_.beam_length);
    requests.push_back({s.new_tokens.back(), h.data() + k * H, width, length});
  }
  absl::StatusOr<std::vector<Beams>> beams =
      st.ok() ? RedrafterBeamSearch(head_.get(), requests) : absl::StatusOr<std::vector<Beams>>(st);
  for (size_t k = 0; k < live.size(); ++k) {
    DraftOutcome& o = out[live[k]];
    if (!beams.ok()) {
      o.status = beams.status();
      continue;
    }
    absl::StatusOr<PackedBeams> packed = PackBeams(requests[k].root, (*beams)[k]);
    if (!packed.ok()) {
      o.status = packed.status();
      continue;
    }
    o.tree = std::move(packed->tree);
    seqs_.AdvanceStep(o.id);
  }
  return out;
}

}  // namespace treespec
