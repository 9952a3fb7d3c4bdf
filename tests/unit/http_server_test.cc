// The HTTP layer end to end over real sockets (cpp-httplib client) against a
// scripted GenerationBackend: routes, request translation, whole and streamed
// bodies, error codes, auth, chat templates, and cancellation on disconnect.
#include "coordinator/http_server.h"

#include "coordinator/http_backend.h"
#include "rpc/bearer_auth.h"
#include "tests/testing/test_util.h"

#include <httplib.h>

#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace treespec {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

class FakeStream : public GenerationStream {
 public:
  FakeStream(std::vector<v1::GenerateResponse> chunks, absl::Status end, bool endless,
             std::atomic<bool>* cancelled)
      : chunks_(std::move(chunks)), end_(end), endless_(endless), cancelled_(cancelled) {}
  bool Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done,
           absl::Status* status) override {
    *done = false;
    if (cancelled_->load()) {
      *done = true;
      *status = absl::CancelledError("cancelled");
      return false;
    }
    if (endless_) {
      absl::SleepFor(absl::Milliseconds(5));
      chunk->Clear();
      chunk->set_text("x");
      return true;
    }
    if (next_ < chunks_.size()) {
      *chunk = chunks_[next_++];
      return true;
    }
    *done = true;
    *status = end_;
    return false;
  }
  void Cancel() override { cancelled_->store(true); }

 private:
  std::vector<v1::GenerateResponse> chunks_;
  size_t next_ = 0;
  absl::Status end_;
  bool endless_;
  std::atomic<bool>* cancelled_;
};

class FakeBackend : public GenerationBackend {
 public:
  absl::StatusOr<std::unique_ptr<GenerationStream>> Generate(const v1::GenerateRequest& request) override {
    absl::MutexLock lock(&mu_);
    last_request_ = request;
    if (!admit_.ok()) return admit_;
    return std::make_unique<FakeStream>(chunks_, end_, endless_, &cancelled_);
  }
  v1::ModelInfo Info() override {
    v1::ModelInfo info;
    info.set_model("demo-model");
    return info;
  }
  absl::Status Health() override { return health_; }

  v1::GenerateRequest last_request() {
    absl::MutexLock lock(&mu_);
    return last_request_;
  }

  absl::Mutex mu_;
  v1::GenerateRequest last_request_;
  absl::Status admit_;
  absl::Status health_;
  std::vector<v1::GenerateResponse> chunks_;
  absl::Status end_;
  bool endless_ = false;
  std::atomic<bool> cancelled_{false};
};

std::vector<v1::GenerateResponse> HelloChunks() {
  std::vector<v1::GenerateResponse> chunks(2);
  chunks[0].set_text("Hel");
  chunks[1].set_text("lo");
  chunks[1].set_finish_reason(v1::FINISH_REASON_STOP);
  chunks[1].mutable_usage()->set_prompt_tokens(3);
  chunks[1].mutable_usage()->set_completion_tokens(2);
  chunks[1].mutable_speculation()->set_drafter("none");
  return chunks;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    backend_.chunks_ = HelloChunks();
    auto server = HttpServer::Start(&backend_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  httplib::Result Post(const std::string& path, const Json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }

  FakeBackend backend_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, HealthModelsAndUnknownRoutes) {
  StartServer();
  auto res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  backend_.health_ = absl::UnavailableError("no healthy worker");
  res = client_->Get("/health");
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(Json::parse(res->body)["error"]["message"], "no healthy worker");
  res = client_->Get("/v1/models");
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(Json::parse(res->body)["data"][0]["id"], "demo-model");
  res = client_->Get("/v1/nothing");
  EXPECT_EQ(res->status, 404);
  EXPECT_THAT(Json::parse(res->body)["error"]["message"].get<std::string>(), HasSubstr("no route GET /v1/nothing"));
}

TEST_F(HttpServerTest, CompletionTranslatesAndAnswers) {
  StartServer();
  auto res = Post("/v1/completions", {{"model", "demo-model"}, {"prompt", "Hi"}, {"max_tokens", 5},
                                      {"temperature", 0}, {"seed", 7}, {"echo", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json body = Json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "demo-model");
  EXPECT_EQ(body["choices"][0]["text"], "HiHello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["total_tokens"], 5);
  EXPECT_EQ(body["speculation"]["drafter"], "none");
  v1::GenerateRequest g = backend_.last_request();
  EXPECT_EQ(g.text(), "Hi");
  EXPECT_EQ(g.max_tokens(), 5);
  EXPECT_EQ(g.sampling().temperature(), 0.0f);
  EXPECT_EQ(g.sampling().seed(), 7u);
}

TEST_F(HttpServerTest, ErrorsHaveOpenAiShapeAndCodes) {
  StartServer();
  auto res = Post("/v1/completions", {{"prompt", "Hi"}, {"n", 3}});
  ASSERT_EQ(res->status, 400);
  Json error = Json::parse(res->body)["error"];
  EXPECT_EQ(error["param"], "n");
  EXPECT_EQ(error["type"], "invalid_request_error");
  res = Post("/v1/completions", {{"prompt", "Hi"}, {"model", "gpt-4"}});
  EXPECT_EQ(res->status, 404);
  EXPECT_THAT(res->body, HasSubstr("gpt-4"));
  EXPECT_EQ(Json::parse(res->body)["error"]["param"], "model");
  backend_.admit_ = absl::ResourceExhaustedError("queue full (64 waiting)");
  res = Post("/v1/completions", {{"prompt", "Hi"}});
  EXPECT_EQ(res->status, 429);
  backend_.admit_ = absl::UnavailableError("no healthy worker");
  res = Post("/v1/completions", {{"prompt", "Hi"}});
  EXPECT_EQ(res->status, 503);
  backend_.admit_ = absl::InvalidArgumentError("max_tokens 10000 exceeds the context");
  res = Post("/v1/completions", {{"prompt", "Hi"}});
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("exceeds the context"));
  backend_.admit_ = absl::OkStatus();
  backend_.end_ = absl::UnavailableError("worker lost");
  res = Post("/v1/completions", {{"prompt", "Hi"}});
  EXPECT_EQ(res->status, 503);
  res = client_->Post("/v1/completions", "{nope", "application/json");
  EXPECT_EQ(res->status, 400);
}

TEST_F(HttpServerTest, BearerTokenFromTheTokenFile) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/tokens";
  testing::WriteFile(file, "# team A\nsekrit\n\nother\n");
  auto auth = BearerAuth::Create({.token_file = file});
  ASSERT_TRUE(auth.ok()) << auth.status();
  HttpServerOptions options;
  options.auth = auth->get();
  StartServer(options);
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    auto res = Post(path, {{"prompt", "Hi"}});
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer") << path;
    EXPECT_EQ(Json::parse(res->body)["error"]["type"], "authentication_error") << path;
    EXPECT_THAT(res->body, HasSubstr("missing bearer token")) << path;
  }
  auto res = client_->Get("/v1/models");
  EXPECT_EQ(res->status, 401);
  // /health stays open.
  res = client_->Get("/health");
  EXPECT_EQ(res->status, 200);

  client_->set_bearer_token_auth("sekri");
  res = Post("/v1/completions", {{"prompt", "Hi"}});
  EXPECT_EQ(res->status, 401);
  EXPECT_THAT(res->body, HasSubstr("invalid bearer token"));
  EXPECT_THAT(res->body, Not(HasSubstr("sekri")));
  for (const std::string token : {"sekrit", "other"}) {
    client_->set_bearer_token_auth(token.c_str());
    res = Post("/v1/completions", {{"prompt", "Hi"}});
    EXPECT_EQ(res->status, 200) << token << ": " << res->body;
    res = client_->Get("/v1/models");
    EXPECT_EQ(res->status, 200) << token;
  }
}

TEST_F(HttpServerTest, ChatRendersTheTemplate) {
  HttpServerOptions options;
  auto tmpl = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(tmpl.ok());
  options.chat_template = *tmpl;
  options.bos_token = "<s>";
  StartServer(options);
  auto res = Post("/v1/chat/completions",
                  {{"messages", {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}}}},
                   {"max_completion_tokens", 4}});
  ASSERT_EQ(res->status, 200) << res->body;
  Json body = Json::parse(res->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  v1::GenerateRequest g = backend_.last_request();
  EXPECT_EQ(g.text(), "<s><system>S<user>U<assistant>");
  EXPECT_TRUE(g.has_add_special_tokens());
  EXPECT_FALSE(g.add_special_tokens());
  EXPECT_EQ(g.max_tokens(), 4);
}

TEST_F(HttpServerTest, ChatWithoutTemplateIs400) {
  StartServer();
  auto res = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "U"}}}}});
  ASSERT_EQ(res->status, 400);
  Json error = Json::parse(res->body)["error"];
  EXPECT_EQ(error["param"], "messages");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("no chat template"));
}

std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos, end - pos));
    pos = end + 2;
  }
  return out;
}

TEST_F(HttpServerTest, StreamedChatWithUsage) {
  HttpServerOptions options;
  options.chat_template = *ChatTemplate::Parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  StartServer(options);
  auto res = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "U"}}}},
                                           {"stream", true},
                                           {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  std::vector<std::string> events = Events(res->body);
  ASSERT_EQ(events.size(), 6u) << res->body;  // role, Hel, lo, finish, usage, [DONE]
  auto json = [&](int i) { return Json::parse(events[i].substr(6)); };
  EXPECT_EQ(json(0)["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json(1)["choices"][0]["delta"]["content"], "Hel");
  EXPECT_EQ(json(2)["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(json(3)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(json(4)["usage"]["total_tokens"], 5);
  EXPECT_EQ(json(4)["choices"], Json::array());
  EXPECT_EQ(events[5], "data: [DONE]");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(json(i)["id"], json(0)["id"]) << i;
}

TEST_F(HttpServerTest, StreamErrorAfterStartIsAnErrorEvent) {
  StartServer();
  backend_.end_ = absl::UnavailableError("worker lost");
  auto res = Post("/v1/completions", {{"prompt", "Hi"}, {"stream", true}});
  ASSERT_EQ(res->status, 200);
  std::vector<std::string> events = Events(res->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_THAT(events[events.size() - 2], HasSubstr("worker lost"));
  EXPECT_EQ(events.back(), "data: [DONE]");
}

TEST_F(HttpServerTest, ClientDisconnectCancelsAStream) {
  StartServer();
  backend_.endless_ = true;
  int num_received = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = Json{{"prompt", "Hi"}, {"stream", true}}.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++num_received < 3; };
  httplib::Result res = client_->send(req);
  EXPECT_FALSE(res);  // the client stopped reading and closed the connection
  for (int i = 0; i < 500 && !backend_.cancelled_.load(); ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(backend_.cancelled_.load()) << "the stream was not cancelled after the client left";
}

TEST(HttpOptionsTest, ChatTemplateFromFlagTokenizerDirOrGguf) {
  const std::string demo = std::string(TREESPEC_SOURCE_DIR) + "/models/demo/target";
  auto plain = HttpOptionsFromFiles("127.0.0.1:0", demo, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->chat_template.has_value());  // the demo model has none
  EXPECT_EQ(plain->bos_token, "<s>");
  EXPECT_EQ(plain->eos_token, "</s>");
  auto missing = HttpOptionsFromFiles("127.0.0.1:0", demo, "/no/such/template.jinja");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--chat_template"));
  auto bad_listen = HttpOptionsFromFiles("nowhere", demo, "");
  EXPECT_THAT(std::string(bad_listen.status().message()), HasSubstr("--http-listen"));

  const std::string gguf =
      testing::SharedModels() + "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (access(gguf.c_str(), R_OK) != 0) GTEST_SKIP() << gguf << " is absent";
  auto smol = HttpOptionsFromFiles("127.0.0.1:0", gguf, "");
  ASSERT_TRUE(smol.ok()) << smol.status();
  ASSERT_TRUE(smol->chat_template.has_value());
  EXPECT_EQ(smol->bos_token, "<|im_start|>");
  EXPECT_EQ(smol->eos_token, "<|im_end|>");
  auto text = ApplyChatTemplate(*smol->chat_template, {{"user", "Hi"}}, {true, "", ""});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(HttpListenTest, ParsesAndRejectsAddresses) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseListenAddress("0.0.0.0:8000", &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_EQ(port, 8000);
  ASSERT_TRUE(ParseListenAddress("[::1]:80", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  absl::Status s = ParseListenAddress("localhost", &host, &port);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--http-listen must be HOST:PORT"));
  EXPECT_FALSE(ParseListenAddress("h:70000", &host, &port).ok());
}

}  // namespace
}  // namespace treespec
