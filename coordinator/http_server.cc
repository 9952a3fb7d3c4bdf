#include "coordinator/http_server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/http_openai_request.h"
#include "coordinator/http_openai_response.h"

namespace treespec {

absl::Status HttpServerOptions::Validate() const {
  std::string host;
  int port = 0;
  if (auto s = ParseListenAddress(listen, &host, &port); !s.ok()) return s;
  if (num_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("http num_threads must be >= 1, got ", num_threads));
  }
  if (poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("http poll_interval must be positive");
  }
  return absl::OkStatus();
}

absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  int p = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 ||
      p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen must be HOST:PORT (port 0-65535), got \"", address, "\""));
  }
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) *host = "0.0.0.0";
  *port = p;
  return absl::OkStatus();
}

struct HttpServer::Impl {
  GenerationBackend* backend = nullptr;
  HttpServerOptions options;
  httplib::Server server;
  std::thread thread;
  std::atomic<uint64_t> next_id{1};
  int64_t started = 0;

  static void SendError(httplib::Response& res, const absl::Status& status) {
    res.status = HttpStatusFor(status);
    res.set_content(ErrorBody(status), "application/json");
  }

  bool Authorized(const httplib::Request& req, httplib::Response& res) const {
    if (options.auth == nullptr) return true;
    absl::Status st = options.auth->Check(req.get_header_value("Authorization"));
    if (st.ok()) return true;
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res, st);
    return false;
  }

  // The GenerateRequest for a parsed OpenAI request, prompt included.
  absl::StatusOr<v1::GenerateRequest> Translate(const OpenAiRequest& req) const {
    v1::GenerateRequest g = req.generate;
    if (req.kind == OpenAiRequest::Kind::kChat) {
      if (!options.chat_template.has_value()) {
        return InvalidParam("messages",
                            "this model has no chat template (tokenizer_config.json "
                            "\"chat_template\"); use /v1/completions, or start the coordinator "
                            "with --chat-template FILE");
      }
      auto text = ApplyChatTemplate(*options.chat_template, req.messages,
                                    {true, options.bos_token, options.eos_token});
      if (!text.ok()) return InvalidParam("messages", text.status().message());
      g.set_text(*text);
      if (!g.has_add_special_tokens()) g.set_add_special_tokens(false);
    } else if (req.prompt_text.has_value()) {
      g.set_text(*req.prompt_text);
    } else {
      for (int32_t id : req.prompt_token_ids) g.mutable_token_ids()->add_ids(id);
    }
    return g;
  }

  void Generate(const httplib::Request& http_req, httplib::Response& res, OpenAiRequest::Kind kind) {
    if (!Authorized(http_req, res)) return;
    auto req = kind == OpenAiRequest::Kind::kChat ? ParseChatRequest(http_req.body)
                                                  : ParseCompletionRequest(http_req.body);
    if (!req.ok()) return SendError(res, req.status());
    v1::ModelInfo info = backend->Info();
    if (!req->model.empty() && req->model != info.model()) {
      return SendError(res, WithOpenAiParam(absl::NotFoundError(absl::StrCat(
                                                "model \"", req->model, "\" not found; this server "
                                                "serves \"", info.model(), "\"")),
                                            "model"));
    }
    if (req->echo && !req->prompt_text.has_value()) {
      return SendError(res, InvalidParam("echo", "'echo' is supported for text prompts only"));
    }
    auto generate = Translate(*req);
    if (!generate.ok()) return SendError(res, generate.status());
    auto started_stream = backend->Generate(*generate);
    if (!started_stream.ok()) return SendError(res, started_stream.status());
    std::shared_ptr<GenerationStream> stream = std::move(*started_stream);

    OpenAiResponseContext ctx;
    ctx.kind = kind;
    ctx.id = absl::StrCat(kind == OpenAiRequest::Kind::kChat ? "chatcmpl-" : "cmpl-", started, "-",
                          next_id.fetch_add(1));
    ctx.created = std::time(nullptr);
    ctx.model = info.model();
    ctx.include_usage = req->include_usage;
    const std::string prefix = req->echo ? *req->prompt_text : "";
    const absl::Duration poll = options.poll_interval;

    if (!req->stream) {
      std::string text = prefix;
      v1::GenerateResponse chunk, last;
      bool done = false;
      absl::Status status;
      while (!done) {
        if (stream->Pop(poll, &chunk, &done, &status)) {
          text += chunk.text();
          if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = chunk;
        }
      }
      if (!status.ok()) return SendError(res, status);
      res.set_content(CompletionBody(ctx, text, last), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, ctx, prefix, poll](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
          bool ok = true;
          if (ctx.kind == OpenAiRequest::Kind::kChat) ok = write(StreamRoleEvent(ctx));
          if (ok && !prefix.empty()) ok = write(StreamTextEvent(ctx, prefix));
          v1::GenerateResponse chunk, last;
          bool done = false;
          absl::Status status;
          while (ok && !done) {
            if (stream->Pop(poll, &chunk, &done, &status)) {
              if (!chunk.text().empty()) ok = write(StreamTextEvent(ctx, chunk.text()));
              if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = chunk;
            } else if (!done && sink.is_writable && !sink.is_writable()) {
              ok = false;
            }
          }
          if (!ok) {
            stream->Cancel();  // the client went away
            return false;
          }
          if (status.ok()) {
            ok = write(StreamFinishEvent(ctx, last)) &&
                 (!ctx.include_usage || write(StreamUsageEvent(ctx, last)));
          } else {
            ok = write(StreamErrorEvent(status));
          }
          if (ok) write(StreamDoneEvent());
          sink.done();
          return true;
        },
        [stream](bool success) {
          if (!success) stream->Cancel();
        });
  }

  void Routes() {
    server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, OpenAiRequest::Kind::kCompletion);
    });
    server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, OpenAiRequest::Kind::kChat);
    });
    server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      res.set_content(ModelsBody(backend->Info().model(), started), "application/json");
    });
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      absl::Status health = backend->Health();
      if (!health.ok()) return SendError(res, health);
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    // A bug that throws (nothing here should) answers 500 instead of ending the process.
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      SendError(res, absl::InternalError(absl::StrCat("internal error in the HTTP layer: ", what)));
    });
    // Unknown routes and any other error without a body get OpenAI's error shape.
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      absl::Status s = res.status == 404
                           ? absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path))
                           : absl::Status(absl::StatusCode::kInvalidArgument,
                                          absl::StrCat("HTTP ", res.status, " for ", req.method, " ", req.path));
      res.set_content(ErrorBody(s), "application/json");
    });
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(GenerationBackend* backend,
                                                              HttpServerOptions options) {
  if (auto s = options.Validate(); !s.ok()) return s;
  std::string host;
  int port = 0;
  if (auto s = ParseListenAddress(options.listen, &host, &port); !s.ok()) return s;
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.backend = backend;
  impl.options = std::move(options);
  impl.started = std::time(nullptr);
  const int num_threads = impl.options.num_threads;
  impl.server.new_task_queue = [num_threads] { return new httplib::ThreadPool(num_threads); };
  impl.server.set_payload_max_length(64 << 20);
  impl.Routes();
  int bound = port;
  if (port == 0) {
    bound = impl.server.bind_to_any_port(host);
  } else if (!impl.server.bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("--http-listen: cannot listen on ", host, ":", port));
  }
  server->port_ = bound;
  impl.thread = std::thread([&impl] { impl.server.listen_after_bind(); });
  while (!impl.server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (impl_ == nullptr) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace treespec
