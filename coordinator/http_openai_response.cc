#include "coordinator/http_openai_response.h"

#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using Json = nlohmann::ordered_json;

// Invalid UTF-8 (a message cut inside a character) is replaced, never thrown.
std::string Dump(const Json& json) { return json.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool IsChat(const OpenAiResponseContext& ctx) { return ctx.kind == OpenAiRequest::Kind::kChat; }

Json Envelope(const OpenAiResponseContext& ctx, bool chunk) {
  const char* object = IsChat(ctx) ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                   : "text_completion";
  return Json{{"id", ctx.id}, {"object", object}, {"created", ctx.created}, {"model", ctx.model}};
}

Json Usage(const v1::GenerateResponse& last) {
  const v1::Usage& u = last.usage();
  return Json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()}};
}

Json Speculation(const v1::GenerateResponse& last) {
  const v1::SpeculationStats& s = last.speculation();
  return Json{{"drafter", s.drafter()},
              {"tree", s.tree()},
              {"steps", s.steps()},
              {"drafted_tokens", s.drafted_tokens()},
              {"accepted_tokens", s.accepted_tokens()},
              {"mean_accepted_length", s.mean_accepted_length()},
              {"fallback_steps", s.fallback_steps()}};
}

Json Timings(const v1::GenerateResponse& last) {
  const v1::Timings& t = last.timings();
  return Json{{"queue_ns", t.queue_ns()},
              {"ttft_ns", t.ttft_ns()},
              {"per_token_ns", t.per_token_ns()},
              {"total_ns", t.total_ns()}};
}

Json Choice(const OpenAiResponseContext& ctx, bool chunk, const std::string& text,
            const Json& finish_reason) {
  Json choice{{"index", 0}};
  if (!IsChat(ctx)) {
    choice["text"] = text;
  } else if (chunk) {
    choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
  } else {
    choice["message"] = Json{{"role", "assistant"}, {"content", text}};
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  return choice;
}

std::string Event(const Json& json) { return "data: " + Dump(json) + "\n\n"; }

std::string ErrorType(int http) {
  switch (http) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 499: return "cancelled";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return "server_error";
  }
}

Json ErrorJson(const absl::Status& status) {
  std::string param = OpenAiParam(status);
  return Json{{"error",
               {{"message", std::string(status.message())},
                {"type", ErrorType(HttpStatusFor(status))},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", absl::StatusCodeToString(status.code())}}}};
}

}  // namespace

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string ErrorBody(const absl::Status& status) { return Dump(ErrorJson(status)); }

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_STOP_STRING: return "stop";
    default: return "stop";
  }
}

std::string CompletionBody(const OpenAiResponseContext& ctx, const std::string& text,
                           const v1::GenerateResponse& last) {
  Json body = Envelope(ctx, false);
  body["choices"] = Json::array({Choice(ctx, false, text, FinishReasonName(last.finish_reason()))});
  body["usage"] = Usage(last);
  body["speculation"] = Speculation(last);
  body["timings"] = Timings(last);
  if (last.has_seed()) body["seed"] = last.seed();
  return Dump(body);
}

std::string StreamRoleEvent(const OpenAiResponseContext& ctx) {
  Json body = Envelope(ctx, true);
  Json choice = Choice(ctx, true, "", nullptr);
  choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
  body["choices"] = Json::array({choice});
  if (ctx.include_usage) body["usage"] = nullptr;
  return Event(body);
}

std::string StreamTextEvent(const OpenAiResponseContext& ctx, const std::string& text) {
  Json body = Envelope(ctx, true);
  body["choices"] = Json::array({Choice(ctx, true, text, nullptr)});
  if (ctx.include_usage) body["usage"] = nullptr;
  return Event(body);
}

std::string StreamFinishEvent(const OpenAiResponseContext& ctx, const v1::GenerateResponse& last) {
  Json body = Envelope(ctx, true);
  body["choices"] = Json::array({Choice(ctx, true, "", FinishReasonName(last.finish_reason()))});
  if (ctx.include_usage) body["usage"] = nullptr;
  body["speculation"] = Speculation(last);
  body["timings"] = Timings(last);
  if (last.has_seed()) body["seed"] = last.seed();
  return Event(body);
}

std::string StreamUsageEvent(const OpenAiResponseContext& ctx, const v1::GenerateResponse& last) {
  Json body = Envelope(ctx, true);
  body["choices"] = Json::array();
  body["usage"] = Usage(last);
  return Event(body);
}

std::string StreamErrorEvent(const absl::Status& status) { return Event(ErrorJson(status)); }

std::string StreamDoneEvent() { return "data: [DONE]\n\n"; }

std::string ModelsBody(const std::string& model, int64_t created) {
  Json body{{"object", "list"},
            {"data", Json::array({Json{{"id", model},
                                       {"object", "model"},
                                       {"created", created},
                                       {"owned_by", "treespec"}}})}};
  return Dump(body);
}

}  // namespace treespec
