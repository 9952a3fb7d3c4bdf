// The OpenAI-compatible HTTP API on real processes: treespec-worker serving the
// CPU demo target (models/demo/target, SentencePiece tokenizer) and
// treespec-coordinator with --http-listen, driven by curl and by the official
// `openai` Python client (installed from PyPI into build/openai-venv on first
// use; the test skips, saying so, only when PyPI cannot be reached).
//
// The demo model has no chat template, so one coordinator gets a ChatML
// template with --chat-template and a second runs without: its chat requests
// must be refused with 400 naming the missing template.
//
// The first coordinator also runs with --auth-token-file: its requests carry
// "Authorization: Bearer <kHttpToken>", and requests without it (or with
// another token) get 401; the second runs without authentication.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr char kHttpToken[] = "sk-treespec-test-9d41";

constexpr char kChatMl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

// A port that was free a moment ago (the coordinator binds it right after).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// The absolute path of `name` on PATH (RunProcess does not search PATH).
std::string Which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return name;
}

Json ParseJson(const std::string& text) { return Json::parse(text, nullptr, /*allow_exceptions=*/false); }

struct Curl {
  int http_code = 0;
  std::string body;
};

// curl -sS with `args`, sending `token` as a bearer token unless empty; the
// last line of stdout is the HTTP code (-w).
Curl RunCurl(std::vector<std::string> args, const std::string& token = "") {
  std::vector<std::string> argv = {Which("curl"), "-sS", "--max-time", "60", "-w", "\n%{http_code}"};
  if (!token.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
  argv.insert(argv.end(), args.begin(), args.end());
  auto run = RunProcess(argv, milliseconds(90000));
  Curl out;
  if (!run.ok()) {
    ADD_FAILURE() << run.status();
    return out;
  }
  size_t nl = run->stdout_text.rfind('\n');
  out.body = run->stdout_text.substr(0, nl);
  out.http_code = std::atoi(run->stdout_text.substr(nl + 1).c_str());
  return out;
}

class OpenAiHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string model = std::string(TREESPEC_SOURCE_DIR) + "/models/demo/target";
    const std::string chat_template = dir_->path() + "/chatml.jinja";
    std::ofstream(chat_template) << kChatMl;
    const std::string tokens = dir_->path() + "/tokens";
    std::ofstream(tokens) << "# test clients\n" << kHttpToken << "\n";
    auto worker = StartWorkerProcess(model);
    if (!worker.ok()) return Fail(worker.status().ToString());
    worker_ = worker->release();
    for (int with_template = 1; with_template >= 0; --with_template) {
      int port = FreePort();
      std::vector<std::string> argv = {BinaryPath("treespec-coordinator"), "--listen", "127.0.0.1:0",
                                       "--workers", worker_->address(), "--tokenizer", model,
                                       "--http-listen", "127.0.0.1:" + std::to_string(port)};
      if (with_template) {
        argv.insert(argv.end(), {"--chat-template", chat_template, "--auth-token-file", tokens});
      }
      auto coordinator = Subprocess::Start(argv, milliseconds(60000));
      if (!coordinator.ok()) return Fail(coordinator.status().ToString());
      std::string url = "http://127.0.0.1:" + std::to_string(port);
      (with_template ? coordinator_ : plain_coordinator_) = coordinator->release();
      (with_template ? url_ : plain_url_) = new std::string(url);
    }
  }
  static void Fail(const std::string& error) { error_ = new std::string(error); }
  static void TearDownTestSuite() {
    delete coordinator_;
    delete plain_coordinator_;
    delete worker_;
    delete dir_;
    delete url_;
    delete plain_url_;
    delete error_;
    coordinator_ = plain_coordinator_ = worker_ = nullptr;
    dir_ = nullptr;
    url_ = plain_url_ = error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(error_, nullptr) << *error_;
    ASSERT_NE(url_, nullptr);
  }
  // With the token of the coordinator at `url` (the first one has one).
  static Curl PostJson(const std::string& url, const std::string& path, const Json& body) {
    return RunCurl({"-H", "Content-Type: application/json", "-d", body.dump(), url + path},
                   url == *url_ ? kHttpToken : "");
  }

  static inline TempDir* dir_ = nullptr;
  static inline Subprocess* worker_ = nullptr;
  static inline Subprocess* coordinator_ = nullptr;
  static inline Subprocess* plain_coordinator_ = nullptr;
  static inline std::string* url_ = nullptr;
  static inline std::string* plain_url_ = nullptr;
  static inline std::string* error_ = nullptr;
};

TEST_F(OpenAiHttpTest, CurlHealthModelsAndCompletion) {
  Curl health = RunCurl({*url_ + "/health"}, kHttpToken);
  EXPECT_EQ(health.http_code, 200) << health.body;
  Curl models = RunCurl({*url_ + "/v1/models"}, kHttpToken);
  ASSERT_EQ(models.http_code, 200) << models.body;
  EXPECT_EQ(ParseJson(models.body)["data"][0]["id"], "target");
  Curl c = PostJson(*url_, "/v1/completions",
                    {{"model", "target"}, {"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(c.http_code, 200) << c.body;
  Json body = ParseJson(c.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(body["usage"]["completion_tokens"], 16);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["speculation"]["drafter"], "none");
  // Greedy decoding is deterministic: the same request gives the same text.
  Curl again = PostJson(*url_, "/v1/completions",
                        {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}});
  EXPECT_EQ(ParseJson(again.body)["choices"][0]["text"], body["choices"][0]["text"]);
}

TEST_F(OpenAiHttpTest, UnseededSamplingReturnsAReproducingSeed) {
  Json request = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 1.0}};
  Curl first = PostJson(*url_, "/v1/completions", request);
  ASSERT_EQ(first.http_code, 200) << first.body;
  Json body = ParseJson(first.body);
  ASSERT_TRUE(body.contains("seed") && body["seed"].is_number_unsigned()) << first.body;
  request["seed"] = body["seed"];
  Curl again = PostJson(*url_, "/v1/completions", request);
  ASSERT_EQ(again.http_code, 200) << again.body;
  EXPECT_EQ(ParseJson(again.body)["choices"][0]["text"], body["choices"][0]["text"]);
  EXPECT_EQ(ParseJson(again.body)["seed"], body["seed"]);
}

TEST_F(OpenAiHttpTest, CurlStreamedChatEndsWithDone) {
  Curl s = RunCurl({"-N", "-H", "Content-Type: application/json", "-d",
                    Json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                         {"max_tokens", 8},
                         {"temperature", 0},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}}
                        .dump(),
                    *url_ + "/v1/chat/completions"},
                   kHttpToken);
  ASSERT_EQ(s.http_code, 200) << s.body;
  EXPECT_THAT(s.body, HasSubstr("\"role\":\"assistant\""));
  EXPECT_THAT(s.body, HasSubstr("\"finish_reason\":\"length\""));
  EXPECT_THAT(s.body, HasSubstr("\"completion_tokens\":8"));
  ASSERT_GE(s.body.size(), 16u);
  EXPECT_EQ(s.body.substr(s.body.size() - 14), "data: [DONE]\n\n");
}

TEST_F(OpenAiHttpTest, CurlErrors) {
  Curl bad = PostJson(*url_, "/v1/completions", {{"prompt", "x"}, {"max_tokens", -1}});
  EXPECT_EQ(bad.http_code, 400) << bad.body;
  EXPECT_EQ(ParseJson(bad.body)["error"]["param"], "max_tokens");
  // Shared validation: the coordinator's own check (token id out of the vocabulary).
  Curl vocab = PostJson(*url_, "/v1/completions", {{"prompt", {1, 2, 99999999}}, {"max_tokens", 2}});
  EXPECT_EQ(vocab.http_code, 400) << vocab.body;
  EXPECT_THAT(vocab.body, HasSubstr("99999999"));
  Curl model = PostJson(*url_, "/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}});
  EXPECT_EQ(model.http_code, 404) << model.body;
  Curl route = RunCurl({*url_ + "/v1/embeddings"}, kHttpToken);
  EXPECT_EQ(route.http_code, 404) << route.body;
  Curl chat = PostJson(*plain_url_, "/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}});
  EXPECT_EQ(chat.http_code, 400) << chat.body;
  EXPECT_THAT(chat.body, HasSubstr("no chat template"));
  Curl plain = PostJson(*plain_url_, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_EQ(plain.http_code, 200) << plain.body;
}

TEST_F(OpenAiHttpTest, CurlWithoutTheTokenGets401) {
  const Json body = {{"prompt", "Once"}, {"max_tokens", 2}};
  for (const std::string token : {"", "sk-treespec-test-9d4", "sk-treespec-test-9d41x"}) {
    for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
      Curl c = RunCurl({"-i", "-H", "Content-Type: application/json", "-d", body.dump(),
                        *url_ + path},
                       token);
      EXPECT_EQ(c.http_code, 401) << "token '" << token << "' " << path << ": " << c.body;
      EXPECT_THAT(c.body, HasSubstr("WWW-Authenticate: Bearer")) << c.body;
      EXPECT_THAT(c.body, HasSubstr("\"authentication_error\"")) << c.body;
      EXPECT_THAT(c.body, HasSubstr(token.empty() ? "missing bearer token" : "invalid bearer token"))
          << c.body;
      if (!token.empty()) {
        EXPECT_THAT(c.body, Not(HasSubstr(token))) << c.body;
      }
    }
  }
  EXPECT_EQ(RunCurl({*url_ + "/v1/models"}).http_code, 401);
  // The health route stays open; the coordinator without a token file needs none.
  EXPECT_EQ(RunCurl({*url_ + "/health"}).http_code, 200);
  Curl plain = PostJson(*plain_url_, "/v1/completions", body);
  EXPECT_EQ(plain.http_code, 200) << plain.body;
}

TEST_F(OpenAiHttpTest, OfficialPythonClient) {
  const std::string venv = std::string(TREESPEC_BINARY_DIR) + "/openai-venv";
  const std::string python = venv + "/bin/python";
  if (access((venv + "/.openai-installed").c_str(), F_OK) != 0) {
    auto made = RunProcess({Which("python3"), "-m", "venv", venv}, milliseconds(120000));
    ASSERT_TRUE(made.ok() && WIFEXITED(made->wait_status) && WEXITSTATUS(made->wait_status) == 0)
        << "python3 -m venv " << venv << " failed";
    auto pip = RunProcess({venv + "/bin/pip", "install", "-q", "--disable-pip-version-check", "openai"},
                          milliseconds(300000));
    if (!pip.ok() || !WIFEXITED(pip->wait_status) || WEXITSTATUS(pip->wait_status) != 0) {
      GTEST_SKIP() << "pip install openai failed (is PyPI reachable?); its output is above";
    }
    std::ofstream(venv + "/.openai-installed") << "openai\n";
  }
  auto run = RunProcess({python, std::string(TREESPEC_SOURCE_DIR) +
                                     "/tests/integration/openai/openai_client_check.py",
                         *url_ + "/v1", kHttpToken},
                        milliseconds(300000));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 0)
      << "openai_client_check.py failed (stderr above); stdout:\n" << run->stdout_text;
  EXPECT_THAT(run->stdout_text, HasSubstr("OK"));
}

}  // namespace
}  // namespace treespec::testing
