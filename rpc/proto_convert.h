// Conversions between treespec.v1 messages and core types (trees, sampling
// parameters, verification modes). Validation of request data happens in
// core (TokenTree::Validate, SamplingParams::Validate); these only copy.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"
#include "core/spec/verify.h"
#include "treespec/v1/common.pb.h"

namespace treespec {

void ToProto(const TokenTree& tree, v1::TokenTree* out);
TokenTree FromProto(const v1::TokenTree& tree);
void ToProto(const SamplingParams& params, uint64_t seed, v1::SamplingParams* out);
SamplingParams FromProto(const v1::SamplingParams& params);
v1::VerificationMode ToProto(VerifyMode mode);
// UNSPECIFIED resolves by temperature: greedy at 0, multi-round otherwise.
VerifyMode FromProto(v1::VerificationMode mode, const SamplingParams& params);
// Features: float rows [values.size() / width, width] <-> f16 bytes.
void ToProto(const std::vector<float>& values, int64_t width, v1::Features* out);
// INVALID_ARGUMENT naming `field` when the bytes are not num_rows x width
// halves. An unset message gives no values.
absl::Status FromProto(const v1::Features& features, const std::string& field,
                       std::vector<float>* out);

}  // namespace treespec
