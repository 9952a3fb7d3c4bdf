// The OpenAI-compatible HTTP API's pure parts: request parsing into the
// coordinator's v1::GenerateRequest with errors naming the field, error bodies
// and HTTP codes, whole and streamed (SSE) response bodies.
#include <random>
#include <string>

#include "coordinator/http_openai_request.h"
#include "coordinator/http_openai_response.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(OpenAiRequestTest, CompletionFieldsMapOntoGenerateRequest) {
  auto req = ParseCompletionRequest(R"({
    "model": "demo", "prompt": "Once upon", "max_tokens": 7, "temperature": 0,
    "top_p": 0.5, "seed": 42, "stop": ["\n", "END"], "n": 1, "stream": true,
    "stream_options": {"include_usage": true}, "top_k": 3, "ignore_eos": true,
    "speculation": {"drafter": "mamba", "tree": "2,2", "verification": "multiround"},
    "user": "ignored", "logprobs": null, "presence_penalty": 0})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->kind, OpenAiRequest::Kind::kCompletion);
  EXPECT_EQ(req->model, "demo");
  EXPECT_EQ(req->prompt_text, "Once upon");
  EXPECT_TRUE(req->stream);
  EXPECT_TRUE(req->include_usage);
  EXPECT_TRUE(req->has_seed);
  const v1::GenerateRequest& g = req->generate;
  EXPECT_EQ(g.max_tokens(), 7);
  EXPECT_EQ(g.sampling().temperature(), 0.0f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.5f);
  EXPECT_EQ(g.sampling().top_k(), 3);
  EXPECT_EQ(g.sampling().seed(), 42u);
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "END");
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.speculation().drafter(), "mamba");
  EXPECT_EQ(g.speculation().tree(), "2,2");
  EXPECT_EQ(g.speculation().verification(), v1::VERIFICATION_MODE_MULTIROUND);
}

TEST(OpenAiRequestTest, DefaultsFollowOpenAi) {
  auto req = ParseCompletionRequest(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->prompt_text.has_value());
  EXPECT_EQ(req->prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(req->generate.sampling().temperature(), 1.0f);  // OpenAI's default
  EXPECT_FALSE(req->generate.sampling().has_top_p());
  EXPECT_EQ(req->generate.max_tokens(), 0);  // the server default
  EXPECT_FALSE(req->has_seed);
  EXPECT_FALSE(req->stream);
  auto one = ParseCompletionRequest(R"({"prompt": ["only one"]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->prompt_text, "only one");
}

TEST(OpenAiRequestTest, ChatMessagesAndMaxCompletionTokens) {
  auto req = ParseChatRequest(R"({"model": "m", "max_tokens": 5, "max_completion_tokens": 9,
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null},
                 {"role": "user", "content": "", "name": "bob"}]})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->kind, OpenAiRequest::Kind::kChat);
  ASSERT_EQ(req->messages.size(), 4u);
  EXPECT_EQ(req->messages[0].role, "system");
  EXPECT_EQ(req->messages[1].content, "Hi there");
  EXPECT_EQ(req->messages[2].content, "");
  EXPECT_EQ(req->generate.max_tokens(), 9);
}

struct BadCase {
  const char* body;
  bool chat;
  const char* param;
  const char* message;
};

TEST(OpenAiRequestTest, BadRequestsNameTheFieldAndValue) {
  const BadCase cases[] = {
      {"not json", false, "", "not valid JSON"},
      {"[1]", false, "", "must be a JSON object"},
      {R"({})", false, "prompt", "'prompt' is required"},
      {R"({"prompt": 5})", false, "prompt", "got 5"},
      {R"({"prompt": ["a", "b"]})", false, "prompt", "batched prompts are not supported"},
      {R"({"prompt": [1, "x"]})", false, "prompt", "token ids"},
      {R"({"prompt": [1, 99999999999]})", false, "prompt", "token ids"},
      {R"({"prompt": "x", "stop_token_ids": [4294967297]})", false, "stop_token_ids", "32-bit"},
      {R"({"prompt": "x", "n": 2})", false, "n", "'n' must be 1 (one choice per request is served), got 2"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens", "at least 1, got 0"},
      {R"({"prompt": "x", "max_tokens": "ten"})", false, "max_tokens", "must be an integer, got \"ten\""},
      {R"({"prompt": "x", "temperature": 3})", false, "temperature", "[0, 2], got 3"},
      {R"({"prompt": "x", "top_p": 0})", false, "top_p", "(0, 1], got 0"},
      {R"({"prompt": "x", "seed": 1.5})", false, "seed", "must be an integer, got 1.5"},
      {R"({"prompt": "x", "stop": [1]})", false, "stop", "a string or an array of strings"},
      {R"({"prompt": "x", "stop": ""})", false, "stop", "must not be empty"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", false, "stream_options",
       "only allowed when 'stream' is true"},
      {R"({"prompt": "x", "logprobs": 2})", false, "logprobs", "not supported"},
      {R"({"prompt": "x", "best_of": 3})", false, "best_of", "not supported"},
      {R"({"prompt": "x", "speculation": {"verification": "maybe"}})", false,
       "speculation.verification", "got \"maybe\""},
      {R"({"messages": []})", true, "messages", "non-empty array"},
      {R"({})", true, "messages", "'messages' is required"},
      {R"({"messages": [{"content": "x"}]})", true, "messages[0].role", "is required"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", true, "messages[0].role", "got \"wizard\""},
      {R"({"messages": [{"role": "user", "content": 7}]})", true, "messages[0].content", "got 7"},
      {R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})", true,
       "messages[0].content", "parts must be"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true,
       "messages[0].content", "parts must be"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", true,
       "tools", "not supported"},
  };
  for (const BadCase& c : cases) {
    auto req = c.chat ? ParseChatRequest(c.body) : ParseCompletionRequest(c.body);
    ASSERT_FALSE(req.ok()) << c.body;
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(std::string(req.status().message()), HasSubstr(c.message)) << c.body;
    EXPECT_EQ(OpenAiParam(req.status()), c.param) << c.body;
    EXPECT_EQ(HttpStatusFor(req.status()), 400);
  }
}

// Found by tests/fuzz/openai_request_fuzz: the error for a mistyped field
// quoted the value with nlohmann's dump(), which recurses once per nesting
// level; a 2 MB body nesting 1000000 levels crashed the coordinator.
TEST(OpenAiRequestTest, DeeplyNestedValuesGiveErrorsNotCrashes) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": )" + deep + "}", "prompt"},
      {R"({"prompt": "x", "stop": )" + deep + "}", "stop"},
      {R"({"prompt": "x", "max_tokens": )" + deep + "}", "max_tokens"},
  };
  for (const auto& [body, param] : cases) {
    auto req = ParseCompletionRequest(body);
    ASSERT_FALSE(req.ok()) << param;
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << param;
    EXPECT_EQ(OpenAiParam(req.status()), param);
    EXPECT_LT(req.status().message().size(), 300u) << param;
  }
  auto chat = ParseChatRequest(R"({"messages": [{"role": "user", "content": )" + deep + "}]}");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(OpenAiParam(chat.status()), "messages[0].content");
}

// Mutated valid bodies: the parser answers with OK or INVALID_ARGUMENT, never
// an exception or a crash (nlohmann::json is used without exceptions).
TEST(OpenAiRequestTest, MutatedBodiesNeverThrow) {
  const std::string seeds[] = {
      R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "seed": 1, "stop": ["a", "b"], "n": 1, "stream": true, "stream_options": {"include_usage": true},
          "speculation": {"drafter": "d", "tree": "2,2", "verification": "greedy"}, "stop_token_ids": [1]})",
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text",
          "text": "t"}]}], "max_completion_tokens": 3, "logprobs": false, "response_format": {"type": "text"}})",
  };
  const char* pieces[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "-1", "1e999",
                          "99999999999999999999", "\"type\"", "\"text\"", "[]", "{}", "0.0"};
  std::mt19937_64 rng(5);
  int num_ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string body = seeds[iter % 2];
    for (int k = 0, n = 1 + rng() % 4; k < n; ++k) {
      size_t pos = rng() % (body.size() + 1);
      if (rng() % 2) {
        body.insert(pos, pieces[rng() % std::size(pieces)]);
      } else if (pos < body.size()) {
        body.erase(pos, 1 + rng() % 6);
      }
    }
    absl::StatusOr<OpenAiRequest> req = iter % 2 ? ParseChatRequest(body) : ParseCompletionRequest(body);
    if (req.ok()) {
      ++num_ok;
    } else {
      EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << body;
    }
  }
  EXPECT_GT(num_ok, 50);
}

TEST(OpenAiResponseTest, ErrorShapeAndHttpCodes) {
  Json body = Json::parse(ErrorBody(InvalidParam("n", "'n' must be 1, got 2")));
  EXPECT_EQ(body["error"]["message"], "'n' must be 1, got 2");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "n");
  EXPECT_EQ(body["error"]["code"], "INVALID_ARGUMENT");
  body = Json::parse(ErrorBody(absl::UnavailableError("no healthy worker")));
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(body["error"]["type"], "service_unavailable_error");
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("")), 401);
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("")), 503);
  EXPECT_EQ(HttpStatusFor(absl::FailedPreconditionError("")), 400);
  EXPECT_EQ(HttpStatusFor(absl::DeadlineExceededError("")), 504);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("")), 500);
}

v1::GenerateResponse LastChunk() {
  v1::GenerateResponse last;
  last.set_finish_reason(v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_prompt_tokens(4);
  last.mutable_usage()->set_completion_tokens(6);
  last.mutable_speculation()->set_drafter("mamba");
  last.mutable_speculation()->set_accepted_tokens(3);
  last.mutable_timings()->set_ttft_ns(1000);
  last.set_seed(99);
  return last;
}

TEST(OpenAiResponseTest, WholeBodies) {
  OpenAiResponseContext ctx{OpenAiRequest::Kind::kChat, "chatcmpl-1", 1700000000, "demo", false};
  Json chat = Json::parse(CompletionBody(ctx, "Hello", LastChunk()));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"], (Json{{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"]["total_tokens"], 10);
  EXPECT_EQ(chat["speculation"]["drafter"], "mamba");
  EXPECT_EQ(chat["speculation"]["accepted_tokens"], 3);
  EXPECT_EQ(chat["timings"]["ttft_ns"], 1000);
  EXPECT_EQ(chat["seed"], 99);
  ctx.kind = OpenAiRequest::Kind::kCompletion;
  Json text = Json::parse(CompletionBody(ctx, "Hello", LastChunk()));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "Hello");
  Json models = Json::parse(ModelsBody("demo", 5));
  EXPECT_EQ(models["data"][0]["id"], "demo");
  EXPECT_EQ(models["data"][0]["object"], "model");
}

Json ParseEvent(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  return Json::parse(event.substr(6, event.size() - 8));
}

TEST(OpenAiResponseTest, StreamedChatEvents) {
  OpenAiResponseContext ctx{OpenAiRequest::Kind::kChat, "chatcmpl-2", 1, "demo", true};
  Json role = ParseEvent(StreamRoleEvent(ctx));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["usage"].is_null());
  EXPECT_TRUE(role.contains("usage"));
  Json text = ParseEvent(StreamTextEvent(ctx, "He said \"hi\"\n"));
  EXPECT_EQ(text["choices"][0]["delta"]["content"], "He said \"hi\"\n");
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());
  Json finish = ParseEvent(StreamFinishEvent(ctx, LastChunk()));
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(finish["choices"][0]["delta"], Json::object());
  EXPECT_EQ(finish["speculation"]["drafter"], "mamba");
  EXPECT_EQ(finish["seed"], 99);
  Json usage = ParseEvent(StreamUsageEvent(ctx, LastChunk()));
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(StreamDoneEvent(), "data: [DONE]\n\n");
  ctx.include_usage = false;
  EXPECT_FALSE(ParseEvent(StreamTextEvent(ctx, "x")).contains("usage"));
  Json error = ParseEvent(StreamErrorEvent(absl::UnavailableError("worker lost")));
  EXPECT_EQ(error["error"]["message"], "worker lost");
}

}  // namespace
}  // namespace treespec

namespace treespec {
namespace {

TEST(OpenAiResponseTest, InvalidUtf8IsReplacedNotThrown) {
  std::string cut = "caf\xc3";  // a message cut inside a character
  Json body = Json::parse(ErrorBody(absl::InvalidArgumentError(cut)));
  EXPECT_EQ(body["error"]["message"], "caf\xef\xbf\xbd");
  OpenAiResponseContext ctx{OpenAiRequest::Kind::kChat, "id", 1, "m", false};
  std::string event = StreamTextEvent(ctx, "\xff");
  EXPECT_THAT(event, HasSubstr("\xef\xbf\xbd"));
}

}  // namespace
}  // namespace treespec
