// The OpenAI-compatible HTTP API (--http-listen HOST:PORT): POST /v1/completions,
// POST /v1/chat/completions (whole or streamed as server-sent events), GET
// /v1/models, GET /health. A thin layer over cpp-httplib: JSON is translated into
// the public v1::GenerateRequest (coordinator/http_openai_request.h) and handed
// to a GenerationBackend, the same entry point the gRPC Generation service uses,
// so validation, defaults and error codes are shared; chunks come back as
// v1::GenerateResponse and are written as OpenAI bodies
// (coordinator/http_openai_response.h).
//
// Chat requests render the model's chat template (core/tokenizer/chat_template.h)
// over the messages with add_generation_prompt and send the text with
// add_special_tokens off (the template writes BOS itself), as transformers'
// apply_chat_template does. A model without a chat template answers chat
// requests with 400 naming the missing template; /v1/completions still works.
//
// A streamed request whose client goes away (a failed write) is cancelled. A
// whole (non-streamed) request cannot notice a disconnect before it finishes
// (cpp-httplib 0.11 exposes no connection state); max_tokens bounds it.
//
// With a BearerAuth (rpc/bearer_auth.h, the one the gRPC service checks), the
// /v1 routes need "Authorization: Bearer <token>": 401 with an OpenAI error body
// and "WWW-Authenticate: Bearer" otherwise. /health stays open.
//
// Thread-safety: handlers run on the server's thread pool; the backend must be
// thread-safe. Stop() (or the destructor) waits for the listener thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tokenizer/chat_template.h"
#include "rpc/bearer_auth.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

// One request in flight, as RequestState offers it to the gRPC handler.
class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Waits up to `timeout`; true with a chunk, or false with *done set once the
  // stream is over (with its final status).
  virtual bool Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done,
                   absl::Status* status) = 0;
  virtual void Cancel() = 0;
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Validates and admits a request; errors carry the coordinator's codes.
  virtual absl::StatusOr<std::unique_ptr<GenerationStream>> Generate(
      const v1::GenerateRequest& request) = 0;
  virtual v1::ModelInfo Info() = 0;
  // OK when the server can take requests; UNAVAILABLE (HTTP 503) otherwise.
  virtual absl::Status Health() = 0;
};

struct HttpServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free one
  int num_threads = 32;                // concurrent connections served
  BearerAuth* auth = nullptr;          // not owned; null: no authentication
  std::optional<ChatTemplate> chat_template;
  std::string bos_token;  // template variables
  std::string eos_token;
  absl::Duration poll_interval = absl::Milliseconds(20);
  absl::Status Validate() const;
};

class HttpServer {
 public:
  // UNAVAILABLE naming --http-listen when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(GenerationBackend* backend,
                                                           HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  struct Impl;
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// "HOST:PORT" (HOST may be "[::1]") into host and port; INVALID_ARGUMENT naming
// --http-listen otherwise.
absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port);

}  // namespace treespec
