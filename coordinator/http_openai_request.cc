#include "coordinator/http_openai_request.h"

#include <cmath>
#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/util/json_fields.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using Json = nlohmann::json;
constexpr char kParamPayload[] = "treespec.dev/openai-param";

// Bounded in depth and length: a body may nest 100000 levels deep.
std::string Show(const Json& v) { return JsonExcerpt(v, 80); }

absl::Status Type(absl::string_view param, absl::string_view expected, const Json& v) {
  return InvalidParam(param, absl::StrCat("'", param, "' must be ", expected, ", got ", Show(v)));
}

bool IsInt32(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= std::numeric_limits<int32_t>::max();
  if (!v.is_number_integer()) return false;
  int64_t i = v.get<int64_t>();
  return i >= std::numeric_limits<int32_t>::min() && i <= std::numeric_limits<int32_t>::max();
}

bool Present(const Json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

absl::StatusOr<int64_t> Int(const Json& v, absl::string_view param) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::abs(d) < 1e15) return static_cast<int64_t>(d);
  }
  return Type(param, "an integer", v);
}

absl::StatusOr<double> Number(const Json& v, absl::string_view param) {
  if (v.is_number()) return v.get<double>();
  return Type(param, "a number", v);
}

absl::StatusOr<bool> Bool(const Json& v, absl::string_view param) {
  if (v.is_boolean()) return v.get<bool>();
  return Type(param, "a boolean", v);
}

absl::StatusOr<std::string> String(const Json& v, absl::string_view param) {
  if (v.is_string()) return v.get<std::string>();
  return Type(param, "a string", v);
}

#define OA_ASSIGN(lhs, expr)                 \
  do {                                       \
    auto _v = (expr);                        \
    if (!_v.ok()) return _v.status();        \
    lhs = *_v;                               \
  } while (0)

absl::Status ParseStreaming(const Json& body, OpenAiRequest* req) {
  if (Present(body, "model")) OA_ASSIGN(req->model, String(body["model"], "model"));
  if (Present(body, "stream")) OA_ASSIGN(req->stream, Bool(body["stream"], "stream"));
  if (Present(body, "stream_options")) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) return Type("stream_options", "an object", so);
    if (!req->stream) {
      return InvalidParam("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    if (Present(so, "include_usage")) {
      OA_ASSIGN(req->include_usage, Bool(so["include_usage"], "stream_options.include_usage"));
    }
  }
  return absl::OkStatus();
}

// max_tokens / max_completion_tokens, temperature, top_p, top_k, seed, n.
absl::Status ParseSampling(const Json& body, OpenAiRequest* req) {
  v1::GenerateRequest& g = req->generate;
  // max_completion_tokens (chat) supersedes the deprecated max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!Present(body, key)) continue;
    int64_t n = 0;
    OA_ASSIGN(n, Int(body[key], key));
    if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
      return InvalidParam(key, absl::StrCat("'", key, "' must be at least 1, got ", n));
    }
    g.set_max_tokens(static_cast<int32_t>(n));
  }
  double temperature = 1.0;
  if (Present(body, "temperature")) OA_ASSIGN(temperature, Number(body["temperature"], "temperature"));
  if (temperature < 0 || temperature > 2) {
    return InvalidParam("temperature", absl::StrCat("'temperature' must be in [0, 2], got ", temperature));
  }
  g.mutable_sampling()->set_temperature(static_cast<float>(temperature));
  if (Present(body, "top_p")) {
    double top_p = 1;
    OA_ASSIGN(top_p, Number(body["top_p"], "top_p"));
    if (!(top_p > 0 && top_p <= 1)) {
      return InvalidParam("top_p", absl::StrCat("'top_p' must be in (0, 1], got ", top_p));
    }
    g.mutable_sampling()->set_top_p(static_cast<float>(top_p));
  }
  if (Present(body, "top_k")) {
    int64_t k = 0;
    OA_ASSIGN(k, Int(body["top_k"], "top_k"));
    if (k < 0 || k > std::numeric_limits<int32_t>::max()) {
      return InvalidParam("top_k", absl::StrCat("'top_k' must be >= 0, got ", k));
    }
    g.mutable_sampling()->set_top_k(static_cast<int32_t>(k));
  }
  if (Present(body, "seed")) {
    int64_t seed = 0;
    OA_ASSIGN(seed, Int(body["seed"], "seed"));
    g.mutable_sampling()->set_seed(static_cast<uint64_t>(seed));
    req->has_seed = true;
  }
  if (Present(body, "n")) {
    int64_t n = 0;
    OA_ASSIGN(n, Int(body["n"], "n"));
    if (n != 1) {
      return InvalidParam("n", absl::StrCat("'n' must be 1 (one choice per request is served), got ", n));
    }
  }
  return absl::OkStatus();
}

// stop, ignore_eos, add_special_tokens, stop_token_ids.
absl::Status ParseStops(const Json& body, v1::GenerateRequest* g) {
  if (Present(body, "stop")) {
    const Json& stop = body["stop"];
    if (stop.is_string()) {
      g->add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const Json& s : stop) {
        if (!s.is_string()) return Type("stop", "a string or an array of strings", stop);
        g->add_stop(s.get<std::string>());
      }
    } else {
      return Type("stop", "a string or an array of strings", stop);
    }
    for (const std::string& s : g->stop()) {
      if (s.empty()) return InvalidParam("stop", "'stop' strings must not be empty");
    }
  }
  if (Present(body, "ignore_eos")) {
    bool b = false;
    OA_ASSIGN(b, Bool(body["ignore_eos"], "ignore_eos"));
    g->set_ignore_eos(b);
  }
  if (Present(body, "add_special_tokens")) {
    bool b = false;
    OA_ASSIGN(b, Bool(body["add_special_tokens"], "add_special_tokens"));
    g->set_add_special_tokens(b);
  }
  if (Present(body, "stop_token_ids")) {
    const Json& ids = body["stop_token_ids"];
    if (!ids.is_array()) return Type("stop_token_ids", "an array of integers", ids);
    for (const Json& id : ids) {
      if (!IsInt32(id)) return Type("stop_token_ids", "an array of 32-bit integers", ids);
      g->add_stop_token_ids(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

// The treespec extension object "speculation": drafter, tree, verification.
absl::Status ParseSpeculation(const Json& body, v1::GenerateRequest* g) {
  if (!Present(body, "speculation")) return absl::OkStatus();
  const Json& spec = body["speculation"];
  if (!spec.is_object()) return Type("speculation", "an object", spec);
  v1::SpeculationOptions* opts = g->mutable_speculation();
  if (Present(spec, "drafter")) {
    std::string s;
    OA_ASSIGN(s, String(spec["drafter"], "speculation.drafter"));
    opts->set_drafter(s);
  }
  if (Present(spec, "tree")) {
    std::string s;
    OA_ASSIGN(s, String(spec["tree"], "speculation.tree"));
    opts->set_tree(s);
  }
  if (Present(spec, "verification")) {
    std::string s;
    OA_ASSIGN(s, String(spec["verification"], "speculation.verification"));
    if (s == "greedy") opts->set_verification(v1::VERIFICATION_MODE_GREEDY);
    else if (s == "multiround") opts->set_verification(v1::VERIFICATION_MODE_MULTIROUND);
    else if (s == "target_sampling") opts->set_verification(v1::VERIFICATION_MODE_TARGET_SAMPLING);
    else if (s != "auto" && !s.empty()) {
      return InvalidParam("speculation.verification",
                          absl::StrCat("'speculation.verification' must be one of greedy, "
                                       "multiround, target_sampling, auto; got \"", s, "\""));
    }
  }
  return absl::OkStatus();
}

// OpenAI features this server does not implement: refuse rather than ignore.
absl::Status RejectUnsupported(const Json& body) {
  auto reject_if = [&](const char* key, bool unsupported) -> absl::Status {
    if (Present(body, key) && unsupported) {
      return InvalidParam(key, absl::StrCat("'", key, "' is not supported by this server, got ",
                                            Show(body[key])));
    }
    return absl::OkStatus();
  };
  auto is_true = [&](const char* key) { return body[key] != Json(false); };
  auto nonzero = [&](const char* key) { return !body[key].is_number() || body[key].get<double>() != 0; };
  for (const auto& [key, bad] : std::initializer_list<std::pair<const char*, bool>>{
           {"logprobs", Present(body, "logprobs") && is_true("logprobs")},
           {"top_logprobs", Present(body, "top_logprobs") && nonzero("top_logprobs")},
           {"presence_penalty", Present(body, "presence_penalty") && nonzero("presence_penalty")},
           {"frequency_penalty", Present(body, "frequency_penalty") && nonzero("frequency_penalty")},
           {"logit_bias", Present(body, "logit_bias") && !body["logit_bias"].empty()},
           {"tools", Present(body, "tools") && !body["tools"].empty()},
           {"functions", Present(body, "functions") && !body["functions"].empty()},
           {"response_format", Present(body, "response_format") &&
                                   body["response_format"] != Json{{"type", "text"}}},
           {"suffix", Present(body, "suffix") && body["suffix"] != Json("")},
           {"best_of", Present(body, "best_of") && body["best_of"] != Json(1)}}) {
    if (auto s = reject_if(key, bad); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The fields common to both endpoints.
absl::Status ParseCommon(const Json& body, OpenAiRequest* req) {
  TS_RETURN_IF_ERROR(ParseStreaming(body, req));
  TS_RETURN_IF_ERROR(ParseSampling(body, req));
  TS_RETURN_IF_ERROR(ParseStops(body, &req->generate));
  TS_RETURN_IF_ERROR(ParseSpeculation(body, &req->generate));
  return RejectUnsupported(body);
}

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidParam("", "request body is not valid JSON");
  if (!json.is_object()) return InvalidParam("", "request body must be a JSON object");
  return json;
}

}  // namespace

absl::Status WithOpenAiParam(absl::Status status, absl::string_view param) {
  if (!param.empty()) status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

absl::Status InvalidParam(absl::string_view param, absl::string_view message) {
  return WithOpenAiParam(absl::InvalidArgumentError(message), param);
}

std::string OpenAiParam(const absl::Status& status) {
  auto payload = status.GetPayload(kParamPayload);
  return payload ? std::string(*payload) : "";
}

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view text) {
  auto body = ParseBody(text);
  if (!body.ok()) return body.status();
  OpenAiRequest req;
  req.kind = OpenAiRequest::Kind::kCompletion;
  if (auto s = ParseCommon(*body, &req); !s.ok()) return s;
  if (!Present(*body, "prompt")) return InvalidParam("prompt", "'prompt' is required");
  const Json& prompt = (*body)["prompt"];
  auto token_ids = [&](const Json& ids) -> absl::Status {
    for (const Json& id : ids) {
      if (!IsInt32(id)) return Type("prompt", "a string, an array of token ids or one of them in an array", prompt);
      req.prompt_token_ids.push_back(id.get<int32_t>());
    }
    if (req.prompt_token_ids.empty()) return InvalidParam("prompt", "'prompt' must not be empty");
    return absl::OkStatus();
  };
  if (prompt.is_string()) {
    req.prompt_text = prompt.get<std::string>();
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    if (auto s = token_ids(prompt); !s.ok()) return s;
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    req.prompt_text = prompt[0].get<std::string>();
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_array()) {
    if (auto s = token_ids(prompt[0]); !s.ok()) return s;
  } else if (prompt.is_array() && prompt.size() > 1) {
    return InvalidParam("prompt", absl::StrCat("batched prompts are not supported: send one prompt per "
                                               "request, got ", prompt.size()));
  } else {
    return Type("prompt", "a string, an array of token ids or one of them in an array", prompt);
  }
  if (Present(*body, "echo")) OA_ASSIGN(req.echo, Bool((*body)["echo"], "echo"));
  return req;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view text) {
  auto body = ParseBody(text);
  if (!body.ok()) return body.status();
  OpenAiRequest req;
  req.kind = OpenAiRequest::Kind::kChat;
  if (auto s = ParseCommon(*body, &req); !s.ok()) return s;
  if (!Present(*body, "messages")) return InvalidParam("messages", "'messages' is required");
  const Json& messages = (*body)["messages"];
  if (!messages.is_array() || messages.empty()) {
    return Type("messages", "a non-empty array of messages", messages);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Type(where, "an object", m);
    if (!Present(m, "role")) return InvalidParam(where + ".role", absl::StrCat("'", where, ".role' is required"));
    ChatMessage out;
    OA_ASSIGN(out.role, String(m["role"], where + ".role"));
    if (out.role != "system" && out.role != "user" && out.role != "assistant" &&
        out.role != "developer" && out.role != "tool") {
      return InvalidParam(where + ".role",
                          absl::StrCat("'", where, ".role' must be system, developer, user, "
                                       "assistant or tool, got \"", out.role, "\""));
    }
    static const Json kAbsent;
    // A reference: copying a JSON value recurses once per nesting level.
    const Json& content = m.contains("content") ? m["content"] : kAbsent;
    if (content.is_string()) {
      out.content = content.get<std::string>();
    } else if (content.is_array()) {
      for (const Json& part : content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return InvalidParam(where + ".content",
                              absl::StrCat("'", where, ".content' parts must be {\"type\": \"text\", "
                                           "\"text\": ...}; got ", Show(part)));
        }
        out.content += part["text"].get<std::string>();
      }
    } else if (!(content.is_null() && out.role == "assistant")) {
      return Type(where + ".content", "a string or an array of text parts", content);
    }
    req.messages.push_back(std::move(out));
  }
  return req;
}

}  // namespace treespec
