#include "coordinator/http_backend.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "coordinator/generate_telemetry.h"
#include "absl/strings/match.h"
#include "core/tokenizer/gguf_tokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/util/gguf.h"
#include "rpc/status_convert.h"

namespace treespec {
namespace {

// Records the request in the coordinator's metrics and traces exactly as the
// gRPC Generation service does (coordinator/generate_telemetry.h).
class RequestStream : public GenerationStream {
 public:
  RequestStream(std::shared_ptr<RequestState> state, std::unique_ptr<GenerateTelemetry> telemetry)
      : state_(std::move(state)), telemetry_(std::move(telemetry)) {}
  ~RequestStream() override {
    state_->Cancel();  // no-op once finished
    Finish(absl::CancelledError("client went away"));
  }

  bool Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done,
           absl::Status* status) override {
    bool got = state_->Pop(timeout, chunk, done, status);
    if (got) telemetry_->OnChunk(*chunk);
    if (*done) Finish(*status);
    return got;
  }
  void Cancel() override {
    state_->Cancel();
    Finish(absl::CancelledError("client went away"));
  }

 private:
  void Finish(const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    telemetry_->Finish(ToGrpc(status));
  }

  std::shared_ptr<RequestState> state_;
  std::unique_ptr<GenerateTelemetry> telemetry_;
  bool finished_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GenerationStream>> CoordinatorHttpBackend::Generate(
    const v1::GenerateRequest& request) {
  const auto received = RequestState::Clock::now();
  auto telemetry = std::make_unique<GenerateTelemetry>(coordinator_->telemetry(), SpanContext{}, received);
  auto state = coordinator_->Submit(request, received, std::nullopt, telemetry->context());
  if (!state.ok()) {
    telemetry->Finish(ToGrpc(state.status()));
    return state.status();
  }
  telemetry->Admitted((*state)->request());
  return std::make_unique<RequestStream>(std::move(*state), std::move(telemetry));
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
  const bool is_gguf = absl::EndsWithIgnoreCase(tokenizer_dir, ".gguf");
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
  } else if (is_gguf) {
    auto file = GgufFile::Open(tokenizer_dir);
    if (!file.ok()) return file.status();
    auto read = GgufChatTemplate(**file);
    if (!read.ok()) return read.status();
    if (!read->empty()) source = *read;
    origin = tokenizer_dir;
    // bos_token / eos_token: the strings of tokenizer.ggml.bos_token_id / eos_token_id.
    auto tokens = (*file)->GetStringArray("tokenizer.ggml.tokens");
    if (tokens.ok()) {
      auto token = [&](const char* key) -> std::string {
        auto id = (*file)->GetIntOr(key, -1);
        if (!id.ok() || *id < 0 || *id >= static_cast<int64_t>((*tokens)->size())) return "";
        return (**tokens)[*id];
      };
      options.bos_token = token("tokenizer.ggml.bos_token_id");
      options.eos_token = token("tokenizer.ggml.eos_token_id");
    }
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
  if (!tokenizer_dir.empty() && !is_gguf) {
    auto config = ReadTokenizerConfig(tokenizer_dir);
    if (!config.ok()) return config.status();
    options.bos_token = config->bos_token;
    options.eos_token = config->eos_token;
  }
  if (auto s = options.Validate(); !s.ok()) return s;
  return options;
}

}  // namespace treespec
