#include "core/spec/verify.h"

#include "core/spec/verify_walk.h"
#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::string_view VerifyModeName(VerifyMode mode) {
  switch (mode) {
    case VerifyMode::kGreedy:
      return "greedy";
    case VerifyMode::kMultiRound:
      return "multiround";
    case VerifyMode::kTargetSampling:
      return "target_sampling";
  }
  return "unknown";
}

absl::StatusOr<VerifyMode> ParseVerifyMode(absl::string_view name) {
  for (VerifyMode mode :
       {VerifyMode::kGreedy, VerifyMode::kMultiRound, VerifyMode::kTargetSampling}) {
    if (name == VerifyModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "verify_mode: \"", name, "\" is not one of greedy, multiround, target_sampling"));
}

absl::Status ValidateVerifyMode(VerifyMode mode, const SamplingParams& params) {
  TS_RETURN_IF_ERROR(params.Validate());
  if (mode == VerifyMode::kGreedy && !params.greedy()) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify_mode: greedy verification needs temperature 0, got temperature ",
                     params.temperature));
  }
  if (mode != VerifyMode::kGreedy && params.greedy()) {
    return absl::InvalidArgumentError(absl::StrCat("verify_mode: ", VerifyModeName(mode),
                                                   " needs temperature > 0; use greedy"));
  }
  return absl::OkStatus();
}

std::vector<int32_t> VerifyResult::NewTokens() const {
  std::vector<int32_t> out = accepted_tokens;
  out.push_back(bonus_token);
  return out;
}

VerifyResult Verify(VerifyMode mode, const TokenTree& tree, const float* logits, int64_t vocab,
                    const SamplingParams& params, RngKey key) {
  TS_CHECK(tree.num_nodes() > 0 && vocab > 0);
  if (mode == VerifyMode::kGreedy || params.greedy()) return VerifyGreedy(tree, logits, vocab);
  if (mode == VerifyMode::kMultiRound) {
    return VerifyMultiRound(tree, logits, vocab, params, key);
  }
  return VerifyTargetSampling(tree, logits, vocab, params, key);
}

absl::StatusOr<VerifyResult> VerifySampledRows(VerifyMode mode, const TokenTree& tree,
                                               int64_t vocab, const SamplingParams& params,
                                               RngKey key, const ProbRows& rows) {
  TS_CHECK(tree.num_nodes() > 0 && vocab > 0);
  TS_CHECK(mode != VerifyMode::kGreedy && !params.greedy());
  absl::Status fetch_status;
  // A failed fetch ends the walk at once (the result is then discarded).
  auto choose = [&](int32_t v, const std::vector<int32_t>& children) {
    absl::StatusOr<const float*> p = rows(v);
    if (!p.ok()) {
      fetch_status = p.status();
      return verify_internal::NodeChoice{-1, -1};
    }
    return mode == VerifyMode::kMultiRound
               ? verify_internal::MultiRoundAt(tree, v, children, *p, vocab, key)
               : verify_internal::TargetSampleAt(tree, v, children, *p, vocab, key);
  };
  VerifyResult r = verify_internal::WalkTree(tree, choose);
  if (!fetch_status.ok()) return fetch_status;
  return r;
}

}  // namespace treespec
