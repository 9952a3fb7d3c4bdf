// Validation of public GenerateRequests into GenerationRequests. Every error
// is INVALID_ARGUMENT (or FAILED_PRECONDITION when the server cannot serve the
// request as configured) and names the field and the offending value.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "coordinator/request.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

struct ValidationContext {
  const Tokenizer* tokenizer = nullptr;  // null: only token-id prompts
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  std::vector<int32_t> eos_token_ids;
  std::set<std::string> drafters;  // configured drafter names
  std::string default_drafter;     // "none" when there is none
  std::string default_tree;        // shape string or "auto"
  int64_t max_tree_nodes = 128;
  int32_t default_max_tokens = 128;
};

absl::StatusOr<GenerationRequest> ValidateRequest(const v1::GenerateRequest& req,
                                                  const ValidationContext& ctx);

}  // namespace treespec
