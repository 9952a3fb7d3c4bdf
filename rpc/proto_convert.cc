#include "rpc/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "core/tensor/dtype.h"

namespace treespec {

void ToProto(const TokenTree& tree, v1::TokenTree* out) {
  out->mutable_tokens()->Assign(tree.tokens.begin(), tree.tokens.end());
  out->mutable_parents()->Assign(tree.parents.begin(), tree.parents.end());
  out->clear_draft();
  for (const SparseDist& q : tree.draft) {
    v1::SparseDistribution* d = out->add_draft();
    d->mutable_tokens()->Assign(q.tokens.begin(), q.tokens.end());
    d->mutable_probs()->Assign(q.probs.begin(), q.probs.end());
  }
}

TokenTree FromProto(const v1::TokenTree& tree) {
  TokenTree t;
  t.tokens.assign(tree.tokens().begin(), tree.tokens().end());
  t.parents.assign(tree.parents().begin(), tree.parents().end());
  for (const v1::SparseDistribution& d : tree.draft()) {
    SparseDist q;
    q.tokens.assign(d.tokens().begin(), d.tokens().end());
    q.probs.assign(d.probs().begin(), d.probs().end());
    t.draft.push_back(std::move(q));
  }
  return t;
}

void ToProto(const SamplingParams& params, uint64_t seed, v1::SamplingParams* out) {
  out->set_temperature(params.temperature);
  out->set_top_k(params.top_k);
  out->set_top_p(params.top_p);
  out->set_seed(seed);
}

SamplingParams FromProto(const v1::SamplingParams& params) {
  SamplingParams p;
  p.temperature = params.temperature();
  p.top_k = params.top_k();
  p.top_p = params.has_top_p() ? params.top_p() : 1.0f;
  return p;
}

v1::VerificationMode ToProto(VerifyMode mode) {
  switch (mode) {
    case VerifyMode::kGreedy: return v1::VERIFICATION_MODE_GREEDY;
    case VerifyMode::kMultiRound: return v1::VERIFICATION_MODE_MULTIROUND;
    case VerifyMode::kTargetSampling: return v1::VERIFICATION_MODE_TARGET_SAMPLING;
  }
  return v1::VERIFICATION_MODE_UNSPECIFIED;
}

VerifyMode FromProto(v1::VerificationMode mode, const SamplingParams& params) {
  switch (mode) {
    case v1::VERIFICATION_MODE_GREEDY: return VerifyMode::kGreedy;
    case v1::VERIFICATION_MODE_MULTIROUND: return VerifyMode::kMultiRound;
    case v1::VERIFICATION_MODE_TARGET_SAMPLING: return VerifyMode::kTargetSampling;
    default: return params.greedy() ? VerifyMode::kGreedy : VerifyMode::kMultiRound;
  }
}

void ToProto(const std::vector<float>& values, int64_t width, v1::Features* out) {
  const int64_t rows = width > 0 ? static_cast<int64_t>(values.size()) / width : 0;
  out->set_num_rows(static_cast<int32_t>(rows));
  out->set_width(static_cast<int32_t>(width));
  std::string* bytes = out->mutable_f16();
  bytes->resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToHalf(values[i]);
    (*bytes)[2 * i] = static_cast<char>(h & 0xff);
    (*bytes)[2 * i + 1] = static_cast<char>(h >> 8);
  }
}

absl::Status FromProto(const v1::Features& features, const std::string& field,
                       std::vector<float>* out) {
  out->clear();
  const int64_t rows = features.num_rows(), width = features.width();
  if (rows < 0 || width < 0 ||
      static_cast<int64_t>(features.f16().size()) != rows * width * 2) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", features.f16().size(),
                                                   " bytes are not num_rows ", rows,
                                                   " x width ", width, " halves"));
  }
  const auto* b = reinterpret_cast<const uint8_t*>(features.f16().data());
  out->resize(rows * width);
  for (int64_t i = 0; i < rows * width; ++i) {
    (*out)[i] = HalfToFloat(static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8)));
  }
  return absl::OkStatus();
}

}  // namespace treespec
