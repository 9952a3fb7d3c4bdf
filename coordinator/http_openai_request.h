// Requests of the OpenAI-compatible HTTP API (POST /v1/completions and
// /v1/chat/completions), parsed from JSON bodies and translated into the
// coordinator's own v1::GenerateRequest, so that range checks, defaults and
// their errors are the gRPC API's (coordinator/validate.h).
//
// Parsing checks JSON types and the OpenAI fields the server does not serve
// (n > 1, logprobs, tools, ...); every error is INVALID_ARGUMENT naming the
// field and value, with the field also attached as the "param" payload that
// the error body reports (OpenAiParam). Pure functions; thread-compatible.
//
// Extensions beyond OpenAI's fields: "speculation": {"drafter", "tree",
// "verification": "greedy" | "multiround" | "target_sampling"}, "top_k",
// "ignore_eos", "stop_token_ids", "add_special_tokens".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tokenizer/chat_template.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

struct OpenAiRequest {
  enum class Kind { kCompletion, kChat };
  Kind kind = Kind::kCompletion;
  std::string model;                   // as the client sent it ("" if absent)
  // kCompletion: a text prompt or token ids (exactly one is used).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_token_ids;
  // kChat: the conversation, content parts joined.
  std::vector<ChatMessage> messages;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: prepend the prompt to the text
  // Everything that maps onto v1::GenerateRequest (prompt left unset).
  v1::GenerateRequest generate;
  // Whether `seed` was given (otherwise the server picks one).
  bool has_seed = false;
};

// Sampling defaults follow OpenAI: temperature 1 and top_p 1 when absent.
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body);
absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body);

// INVALID_ARGUMENT for `param` with the "param" payload set.
absl::Status InvalidParam(absl::string_view param, absl::string_view message);
// `status` with the "param" payload set to `param`.
absl::Status WithOpenAiParam(absl::Status status, absl::string_view param);
// The "param" payload of a status, "" if none.
std::string OpenAiParam(const absl::Status& status);

}  // namespace treespec
