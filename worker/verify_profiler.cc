#include "worker/verify_profiler.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr uint64_t kProfileIdBase = uint64_t{1} << 63;

// Throw-away sequences of one context length, stepped together.
class ProfileSequences {
 public:
  ProfileSequences(TargetRunner* runner, uint64_t first_id) : runner_(runner), first_id_(first_id) {}
  ~ProfileSequences() { runner_->Release(ids_); }

  absl::Status Open(int64_t count, int64_t context, int64_t max_total) {
    const int64_t vocab = runner_->vocab_size();
    std::vector<OpenSpec> specs(count);
    for (int64_t i = 0; i < count; ++i) {
      specs[i].id = first_id_ + i;
      specs[i].max_total_tokens = max_total;
      for (int64_t j = 0; j < context; ++j) {
        specs[i].prompt.push_back(static_cast<int32_t>((i * 7919 + j * 31 + 1) % vocab));
      }
    }
    std::vector<OpenOutcome> out = runner_->Open(specs);
    for (const OpenOutcome& o : out) {
      if (o.status.ok()) ids_.push_back(o.id);
    }
    for (const OpenOutcome& o : out) {
      if (!o.status.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("verify profile: cannot open ", count, " sequences of ", context,
                         " tokens: ", o.status.message()));
      }
      pending_.push_back(o.first_token);
      steps_.push_back(1);
      tokens_.push_back(context);
    }
    return absl::OkStatus();
  }

  // One Verify of the first `batch` sequences with chains of `nodes` nodes.
  absl::StatusOr<VerifySample> Step(int64_t batch, int64_t nodes) {
    const int64_t vocab = runner_->vocab_size();
    std::vector<StepSpec> specs(batch);
    VerifySample sample;
    sample.features = {batch, batch * nodes, 0};
    for (int64_t i = 0; i < batch; ++i) {
      std::vector<int32_t> chain;
      for (int64_t k = 1; k < nodes; ++k) {
        chain.push_back(static_cast<int32_t>((steps_[i] * 13 + k * 101 + i * 7 + 3) % vocab));
      }
      specs[i].id = ids_[i];
      specs[i].step = steps_[i];
      specs[i].tree = TokenTree::Chain(pending_[i], chain);
      sample.features.context_tokens += tokens_[i];
    }
    StepTimings timings;
    std::vector<StepOutcome> out = runner_->Verify(specs, &timings);
    for (int64_t i = 0; i < batch; ++i) {
      if (!out[i].status.ok()) {
        return absl::Status(out[i].status.code(),
                            absl::StrCat("verify profile step: ", out[i].status.message()));
      }
      pending_[i] = out[i].tokens.back();
      steps_[i] += 1;
      tokens_[i] += static_cast<int64_t>(out[i].tokens.size());
    }
    sample.seconds = std::max<double>(timings.forward_ns, 1) * 1e-9;
    return sample;
  }

 private:
  TargetRunner* runner_;
  uint64_t first_id_;
  std::vector<uint64_t> ids_;
  std::vector<int32_t> pending_;
  std::vector<uint64_t> steps_;
  std::vector<int64_t> tokens_;
};

std::vector<int64_t> CutTo(std::vector<int64_t> v, int64_t limit) {
  for (int64_t& x : v) x = std::clamp<int64_t>(x, 1, limit);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

absl::Status VerifyProfileOptions::Validate() const {
  for (const auto* v : {&batches, &tokens_per_sequence, &contexts}) {
    if (v->empty()) return absl::InvalidArgumentError("verify profile: empty grid axis");
    for (int64_t x : *v) {
      if (x < 1) return absl::InvalidArgumentError(absl::StrCat("verify profile: grid value ", x));
    }
  }
  if (repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("verify profile: repeats ", repeats));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<VerifySample>> ProfileVerifySteps(TargetRunner* runner,
                                                             const VerifyProfileOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  const TargetRunnerOptions& limits = runner->options();
  const std::vector<int64_t> batches = CutTo(options.batches, limits.max_sequences);
  const std::vector<int64_t> nodes = CutTo(options.tokens_per_sequence, limits.max_tree_nodes);
  const int64_t steps = static_cast<int64_t>(batches.size() * nodes.size()) * options.repeats + 1;
  // Each step commits at most `nodes.back()` tokens; keep room for all of them.
  const int64_t room = steps * nodes.back();
  const std::vector<int64_t> contexts =
      CutTo(options.contexts, std::max<int64_t>(1, limits.max_context - room - 1));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + absl::ToChronoNanoseconds(options.budget);
  std::vector<VerifySample> samples;
  uint64_t next_id = kProfileIdBase;
  for (int64_t context : contexts) {
    ProfileSequences seqs(runner, next_id);
    next_id += batches.back();
    const int64_t max_total = std::min<int64_t>(limits.max_context, context + room + 1);
    TS_RETURN_IF_ERROR(seqs.Open(batches.back(), context, max_total));
    TS_RETURN_IF_ERROR(seqs.Step(batches.front(), nodes.front()).status());  // warm-up
    // Batch innermost: a grid cut short by the budget still varies every feature.
    for (int64_t n : nodes) {
      for (int64_t b : batches) {
        if (std::chrono::steady_clock::now() > deadline && samples.size() >= 10) return samples;
        for (int32_t r = 0; r < options.repeats; ++r) {
          TS_ASSIGN_OR_RETURN(VerifySample s, seqs.Step(b, n));
          samples.push_back(s);
        }
      }
    }
  }
  return samples;
}

absl::StatusOr<VerifyCostModel> MeasureVerifyCost(TargetRunner* runner,
                                                  const VerifyProfileOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<VerifySample> samples, ProfileVerifySteps(runner, options));
  return VerifyCostModel::FitProfile(samples);
}

}  // namespace treespec
