// Response bodies of the OpenAI-compatible HTTP API: whole completions, the
// server-sent-event chunks of streamed ones ("data: {json}\n\n", ending with
// "data: [DONE]\n\n"), GET /v1/models, and errors in OpenAI's shape
// {"error": {"message", "type", "param", "code"}} with the HTTP status that fits
// the Status code. Built from the coordinator's v1::GenerateResponse chunks; the
// final chunk's speculation statistics and timings are an extension field,
// "speculation" / "timings", with "seed": the seed the request ran with (the
// server draws one when the request gave none; sending it back reproduces the
// text). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "coordinator/http_openai_request.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

struct OpenAiResponseContext {
  OpenAiRequest::Kind kind = OpenAiRequest::Kind::kCompletion;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool include_usage = false;  // streaming: "usage": null on chunks, then a usage chunk
};

// 400 INVALID_ARGUMENT / FAILED_PRECONDITION / OUT_OF_RANGE, 401 UNAUTHENTICATED,
// 403 PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 499 CANCELLED,
// 501 UNIMPLEMENTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, 500 otherwise.
int HttpStatusFor(const absl::Status& status);
std::string ErrorBody(const absl::Status& status);

// "stop" for EOS, stop tokens and stop strings, "length" for max_tokens.
const char* FinishReasonName(v1::FinishReason reason);

// A whole (non-streamed) response: `text` is all the generated text, `last` the
// final chunk (finish reason, usage, timings, speculation).
std::string CompletionBody(const OpenAiResponseContext& ctx, const std::string& text,
                           const v1::GenerateResponse& last);

// Streamed responses, one SSE event each.
std::string StreamRoleEvent(const OpenAiResponseContext& ctx);  // chat: delta {role}
std::string StreamTextEvent(const OpenAiResponseContext& ctx, const std::string& text);
std::string StreamFinishEvent(const OpenAiResponseContext& ctx, const v1::GenerateResponse& last);
// With include_usage only: choices [] and the usage.
std::string StreamUsageEvent(const OpenAiResponseContext& ctx, const v1::GenerateResponse& last);
// An error after the stream started (headers already sent).
std::string StreamErrorEvent(const absl::Status& status);
std::string StreamDoneEvent();

std::string ModelsBody(const std::string& model, int64_t created);

}  // namespace treespec
