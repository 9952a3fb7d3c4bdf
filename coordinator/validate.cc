#include "coordinator/validate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/spec/stop.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status ValidatePrompt(const v1::GenerateRequest& req, const ValidationContext& ctx,
                            GenerationRequest* out) {
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (ctx.tokenizer == nullptr) {
        return absl::FailedPreconditionError(
            "text: this server has no tokenizer (start the coordinator with --tokenizer); "
            "send token_ids instead");
      }
      if (req.text().size() > (4u << 20)) {
        return Bad("text", absl::StrCat("prompt of ", req.text().size(), " bytes exceeds 4 MiB"));
      }
      const bool special = !req.has_add_special_tokens() || req.add_special_tokens();
      absl::StatusOr<std::vector<int32_t>> ids = ctx.tokenizer->Encode(req.text(), special);
      if (!ids.ok()) return Bad("text", std::string(ids.status().message()));
      out->prompt = std::move(*ids);
      if (out->prompt.empty()) return Bad("text", "the prompt encodes to no tokens");
      return absl::OkStatus();
    }
    case v1::GenerateRequest::kTokenIds: {
      out->prompt.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      if (out->prompt.empty()) return Bad("token_ids.ids", "is empty");
      for (int i = 0; i < static_cast<int>(out->prompt.size()); ++i) {
        if (out->prompt[i] < 0 || out->prompt[i] >= ctx.vocab_size) {
          return Bad(absl::StrCat("token_ids.ids[", i, "]"),
                     absl::StrCat(out->prompt[i], " is outside the vocabulary [0, ",
                                  ctx.vocab_size, ")"));
        }
      }
      return absl::OkStatus();
    }
    default:
      return Bad("prompt", "set either text or token_ids");
  }
}

absl::Status ValidateSampling(const v1::SamplingParams& s, GenerationRequest* out) {
  if (!std::isfinite(s.temperature()) || s.temperature() < 0.0f || s.temperature() > 100.0f) {
    return Bad("sampling.temperature", absl::StrCat(s.temperature(), " is outside [0, 100]"));
  }
  if (s.top_k() < 0) return Bad("sampling.top_k", absl::StrCat(s.top_k(), " is negative"));
  if (s.has_top_p() && !(s.top_p() > 0.0f && s.top_p() <= 1.0f)) {
    return Bad("sampling.top_p", absl::StrCat(s.top_p(), " is outside (0, 1]"));
  }
  out->sampling.temperature = s.temperature();
  out->sampling.top_k = s.top_k();
  out->sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  out->seed = s.seed();
  return absl::OkStatus();
}

// max_tokens against the prompt and the context; the prompt must be set.
absl::Status ValidateLength(const v1::GenerateRequest& req, const ValidationContext& ctx,
                            GenerationRequest* out) {
  if (req.max_tokens() < 0) {
    return Bad("max_tokens", absl::StrCat(req.max_tokens(), " is negative"));
  }
  out->max_tokens = req.max_tokens() == 0 ? ctx.default_max_tokens : req.max_tokens();
  const int64_t prompt_len = static_cast<int64_t>(out->prompt.size());
  if (prompt_len >= ctx.max_context) {
    return Bad(req.prompt_case() == v1::GenerateRequest::kText ? "text" : "token_ids",
               absl::StrCat("prompt of ", prompt_len, " tokens leaves no room in the context of ",
                            ctx.max_context));
  }
  if (prompt_len + out->max_tokens > ctx.max_context) {
    if (req.max_tokens() != 0) {
      return Bad("max_tokens", absl::StrCat(req.max_tokens(), " plus the prompt's ", prompt_len,
                                            " tokens exceeds the context of ", ctx.max_context));
    }
    out->max_tokens = static_cast<int32_t>(ctx.max_context - prompt_len);
  }
  return absl::OkStatus();
}

absl::Status ValidateStops(const v1::GenerateRequest& req, const ValidationContext& ctx,
                           GenerationRequest* out) {
  if (req.stop_size() > kMaxStopStrings) {
    return Bad("stop", absl::StrCat(req.stop_size(), " strings; at most ", kMaxStopStrings));
  }
  out->stop_strings.assign(req.stop().begin(), req.stop().end());
  TS_RETURN_IF_ERROR(StopStringMatcher::Create(out->stop_strings).status());
  for (int i = 0; i < req.stop_token_ids_size(); ++i) {
    const int32_t id = req.stop_token_ids(i);
    if (id < 0 || id >= ctx.vocab_size) {
      return Bad(absl::StrCat("stop_token_ids[", i, "]"),
                 absl::StrCat(id, " is outside the vocabulary [0, ", ctx.vocab_size, ")"));
    }
    out->stop_token_ids.push_back(id);
  }
  if (!req.ignore_eos()) {
    out->stop_token_ids.insert(out->stop_token_ids.end(), ctx.eos_token_ids.begin(),
                               ctx.eos_token_ids.end());
  }
  return absl::OkStatus();
}

// Drafter, tree and verification mode; the sampling must be set.
absl::Status ValidateSpeculation(const v1::SpeculationOptions& sp, const ValidationContext& ctx,
                                 GenerationRequest* out) {
  std::string drafter = sp.drafter().empty() || sp.drafter() == "auto" ? ctx.default_drafter
                                                                        : sp.drafter();
  if (drafter != "none" && !ctx.drafters.count(drafter)) {
    std::string known = "none";
    for (const std::string& d : ctx.drafters) absl::StrAppend(&known, ", ", d);
    return Bad("speculation.drafter",
               absl::StrCat("'", sp.drafter(), "' is not a configured drafter (", known, ")"));
  }
  out->drafter = drafter;
  const std::string tree = sp.tree().empty() ? ctx.default_tree : sp.tree();
  if (tree == "auto") {
    out->auto_tree = drafter != "none";
  } else {
    absl::StatusOr<TreeShape> shape = TreeShape::Parse(tree);
    if (!shape.ok()) return Bad("speculation.tree", std::string(shape.status().message()));
    if (shape->NumNodes() > ctx.max_tree_nodes) {
      return Bad("speculation.tree", absl::StrCat("'", tree, "' has ", shape->NumNodes(),
                                                  " nodes; the server allows ",
                                                  ctx.max_tree_nodes));
    }
    if (drafter != "none") out->tree = *shape;
  }
  if (!v1::VerificationMode_IsValid(sp.verification())) {
    return Bad("speculation.verification",
               absl::StrCat(static_cast<int>(sp.verification()), " is not a verification mode"));
  }
  switch (sp.verification()) {
    case v1::VERIFICATION_MODE_GREEDY: out->mode = VerifyMode::kGreedy; break;
    case v1::VERIFICATION_MODE_MULTIROUND: out->mode = VerifyMode::kMultiRound; break;
    case v1::VERIFICATION_MODE_TARGET_SAMPLING: out->mode = VerifyMode::kTargetSampling; break;
    default: break;
  }
  if (out->mode.has_value()) {
    absl::Status st = ValidateVerifyMode(*out->mode, out->sampling);
    if (!st.ok()) return Bad("speculation.verification", std::string(st.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationRequest> ValidateRequest(const v1::GenerateRequest& req,
                                                  const ValidationContext& ctx) {
  GenerationRequest out;
  TS_RETURN_IF_ERROR(ValidatePrompt(req, ctx, &out));
  TS_RETURN_IF_ERROR(ValidateSampling(req.sampling(), &out));
  TS_RETURN_IF_ERROR(ValidateLength(req, ctx, &out));
  TS_RETURN_IF_ERROR(ValidateStops(req, ctx, &out));
  TS_RETURN_IF_ERROR(ValidateSpeculation(req.speculation(), ctx, &out));
  return out;
}

}  // namespace treespec
