#include "coordinator/http_backend.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/tokenizer_config.h"

namespace treespec {
namespace {

class RequestStream : public GenerationStream {
 public:
  explicit RequestStream(std::shared_ptr<RequestState> state) : state_(std::move(state)) {}
  ~RequestStream() override { state_->Cancel(); }  // no-op once finished

  bool Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done,
           absl::Status* status) override {
    return state_->Pop(timeout, chunk, done, status);
  }
  void Cancel() override { state_->Cancel(); }

 private:
  std::shared_ptr<RequestState> state_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GenerationStream>> CoordinatorHttpBackend::Generate(
    const v1::GenerateRequest& request) {
  auto state = coordinator_->Submit(request, RequestState::Clock::now(), std::nullopt);
  if (!state.ok()) return state.status();
  return std::make_unique<RequestStream>(std::move(*state));
}

absl::Status CoordinatorHttpBackend::Health() {
  for (const auto& worker : coordinator_->workers()) {
    if (worker->health.healthy()) return absl::OkStatus();
  }
  return absl::UnavailableError("no healthy worker group");
}

absl::StatusOr<HttpServerOptions> HttpOptionsFromFiles(const std::string& listen,
                                                       const std::string& tokenizer_dir,
                                                       const std::string& chat_template_file) {
  HttpServerOptions options;
  options.listen = listen;
  std::optional<std::string> source;
  std::string origin;
  if (!chat_template_file.empty()) {
    std::ifstream in(chat_template_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat_template: cannot read \"", chat_template_file, "\""));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    origin = "--chat_template " + chat_template_file;
  } else if (!tokenizer_dir.empty()) {
    auto read = ReadChatTemplate(tokenizer_dir);
    if (!read.ok()) return read.status();
    source = *read;
    origin = tokenizer_dir;
  }
  if (source.has_value()) {
    auto parsed = ChatTemplate::Parse(*source);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template of ", origin, ": ", parsed.status().message()));
    }
    options.chat_template = *parsed;
  }
  if (!tokenizer_dir.empty()) {
    auto config = ReadTokenizerConfig(tokenizer_dir);
    if (!config.ok()) return config.status();
    options.bos_token = config->bos_token;
    options.eos_token = config->eos_token;
  }
  if (auto s = options.Validate(); !s.ok()) return s;
  return options;
}

}  // namespace treespec
