// The Coordinator as the HTTP API's GenerationBackend: the same Submit /
// RequestState::Pop path the gRPC Generation service takes, with the same
// `generate` metrics and span (coordinator/generate_telemetry.h). Thread-safe.
#pragma once

#include <memory>

#include "coordinator/coordinator.h"
#include "coordinator/http_server.h"

namespace treespec {

class CoordinatorHttpBackend : public GenerationBackend {
 public:
  explicit CoordinatorHttpBackend(Coordinator* coordinator) : coordinator_(coordinator) {}

  absl::StatusOr<std::unique_ptr<GenerationStream>> Generate(
      const v1::GenerateRequest& request) override;
  v1::ModelInfo Info() override { return coordinator_->ModelInfo(); }
  // UNAVAILABLE when no worker group is healthy.
  absl::Status Health() override;

 private:
  Coordinator* coordinator_;
};

// HTTP options for --http-listen: the chat template from `chat_template_file`
// if given, else from the tokenizer directory (ReadChatTemplate) or .gguf file
// (tokenizer.chat_template); none: chat requests get 400. bos_token / eos_token
// from tokenizer_config.json, or the GGUF's BOS / EOS token strings. Errors name
// the flag or file.
absl::StatusOr<HttpServerOptions> HttpOptionsFromFiles(const std::string& listen,
                                                       const std::string& tokenizer_dir,
                                                       const std::string& chat_template_file);

}  // namespace treespec
