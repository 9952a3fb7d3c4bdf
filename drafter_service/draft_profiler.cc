#include "drafter_service/draft_profiler.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr uint64_t kProfileIdBase = uint64_t{1} << 63;
constexpr float kFeatureValue = 0.5f;

// Throw-away sequences drafted together; released on destruction.
class DraftSequences {
 public:
  explicit DraftSequences(Drafter* drafter) : drafter_(drafter) {}
  ~DraftSequences() { drafter_->Release(ids_); }

  absl::Status Open(int64_t count, int32_t prompt_tokens) {
    const int64_t vocab = drafter_->vocab_size();
    std::vector<DrafterOpenSpec> specs(count);
    for (int64_t i = 0; i < count; ++i) {
      specs[i].id = kProfileIdBase + i;
      for (int32_t j = 0; j < prompt_tokens; ++j) {
        specs[i].prompt.push_back(static_cast<int32_t>((i * 7919 + j * 31 + 1) % vocab));
      }
      // Drafters reading the target's features (EAGLE, ReDrafter heads) get
      // constant ones: their cost does not depend on the values.
      specs[i].features.assign(std::max(0, prompt_tokens - 1) * drafter_->feature_width(),
                               kFeatureValue);
    }
    std::vector<absl::Status> out = drafter_->Open(specs);
    for (int64_t i = 0; i < count; ++i) {
      if (out[i].ok()) ids_.push_back(specs[i].id);
    }
    for (const absl::Status& st : out) {
      if (!st.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("draft profile: cannot open ", count, " sequences: ", st.message()));
      }
    }
    steps_.assign(count, 1);
    return absl::OkStatus();
  }

  // One Draft call for the first `batch` sequences with `shape`.
  absl::StatusOr<DraftSample> Draft(int64_t batch, const TreeShape& shape) {
    const int64_t vocab = drafter_->vocab_size();
    std::vector<DraftSpec> specs(batch);
    for (int64_t i = 0; i < batch; ++i) {
      specs[i].id = ids_[i];
      specs[i].step = steps_[i];
      specs[i].new_tokens = {static_cast<int32_t>((steps_[i] * 13 + i * 7 + 5) % vocab)};
      specs[i].shape = shape;
      specs[i].temperature = 1.0f;  // no pre-drafting; see the header
      specs[i].seed = steps_[i];
      specs[i].features.assign(drafter_->feature_width(), kFeatureValue);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<DraftOutcome> out = drafter_->Draft(specs);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    DraftSample sample;
    sample.seconds = std::max(seconds, 1e-9);
    for (int64_t i = 0; i < batch; ++i) {
      if (!out[i].status.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("draft profile: Draft failed: ", out[i].status.message()));
      }
      steps_[i] += 1;
      const std::vector<int32_t> depths = out[i].tree.Depths();
      const int64_t depth = *std::max_element(depths.begin(), depths.end());
      sample.features.levels = std::max(sample.features.levels, depth);
      sample.features.seq_levels += depth;
      sample.features.nodes += out[i].tree.num_nodes() - 1;
    }
    return sample;
  }

 private:
  Drafter* drafter_;
  std::vector<uint64_t> ids_;
  std::vector<uint64_t> steps_;
};

// Fanouts {width, 1, 1, ...} of `depth` levels, cut to `max_nodes` (root included).
absl::StatusOr<TreeShape> ProfileShape(int32_t depth, int32_t width, int64_t max_nodes) {
  width = static_cast<int32_t>(std::clamp<int64_t>(width, 1, max_nodes - 1));
  depth = static_cast<int32_t>(std::clamp<int64_t>(depth, 1, (max_nodes - 1) / width));
  std::vector<int32_t> fanouts(depth, 1);
  fanouts[0] = width;
  return TreeShape::FromFanouts(fanouts);
}

}  // namespace

absl::Status DraftProfileOptions::Validate() const {
  if (batches.empty() || depths.empty() || widths.empty()) {
    return absl::InvalidArgumentError("draft profile: empty grid axis");
  }
  for (int64_t b : batches) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("draft profile: batch ", b));
  }
  for (const auto* v : {&depths, &widths}) {
    for (int32_t x : *v) {
      if (x < 1) return absl::InvalidArgumentError(absl::StrCat("draft profile: grid value ", x));
    }
  }
  if (repeats < 1 || prompt_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("draft profile: repeats ", repeats,
                                                   ", prompt_tokens ", prompt_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DraftSample>> ProfileDraftCalls(Drafter* drafter,
                                                           int64_t max_sequences,
                                                           int64_t max_tree_nodes,
                                                           const DraftProfileOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (max_tree_nodes < 2 || max_sequences < 1) {
    return absl::FailedPreconditionError("draft profile: the drafter allows no tree");
  }
  std::vector<int64_t> batches = options.batches;
  for (int64_t& b : batches) b = std::min(b, max_sequences);
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  DraftSequences seqs(drafter);
  TS_RETURN_IF_ERROR(seqs.Open(batches.back(), options.prompt_tokens));
  TS_ASSIGN_OR_RETURN(TreeShape warm, ProfileShape(1, 1, max_tree_nodes));
  TS_RETURN_IF_ERROR(seqs.Draft(batches.front(), warm).status());
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options.budget);
  std::vector<DraftSample> samples;
  // Batch innermost: a grid cut short by the budget still varies every feature.
  for (int32_t d : options.depths) {
    for (int32_t w : options.widths) {
      TS_ASSIGN_OR_RETURN(TreeShape shape, ProfileShape(d, w, max_tree_nodes));
      for (int64_t b : batches) {
        if (std::chrono::steady_clock::now() > deadline && samples.size() >= 8) return samples;
        for (int32_t r = 0; r < options.repeats; ++r) {
          TS_ASSIGN_OR_RETURN(DraftSample s, seqs.Draft(b, shape));
          samples.push_back(s);
        }
      }
    }
  }
  return samples;
}

absl::StatusOr<DraftCostModel> MeasureDraftCost(Drafter* drafter, int64_t max_sequences,
                                                int64_t max_tree_nodes,
                                                const DraftProfileOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<DraftSample> samples,
                      ProfileDraftCalls(drafter, max_sequences, max_tree_nodes, options));
  return DraftCostModel::FitProfile(samples);
}

}  // namespace treespec
