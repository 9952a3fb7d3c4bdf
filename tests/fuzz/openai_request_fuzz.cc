// libFuzzer target: an OpenAI HTTP request body. The first byte picks the
// endpoint (even: /v1/completions, odd: /v1/chat/completions), the rest is the
// JSON body given to ParseCompletionRequest / ParseChatRequest; an accepted
// completion request with a prompt then goes through ValidateRequest as the
// HTTP backend sends it (token-id prompts only: no tokenizer here).
#include <cstdint>
#include <string>

#include "coordinator/http_openai_request.h"
#include "coordinator/validate.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body = treespec::fuzz::Bytes(data + 1, size - 1);
  auto req = chat ? treespec::ParseChatRequest(body) : treespec::ParseCompletionRequest(body);
  if (!req.ok()) {
    treespec::fuzz::Consume(treespec::OpenAiParam(req.status()).size());
    return 0;
  }
  treespec::fuzz::Consume(req->messages.size());
  if (req->prompt_token_ids.empty()) return 0;
  treespec::v1::GenerateRequest generate = req->generate;
  for (int32_t id : req->prompt_token_ids) generate.mutable_token_ids()->add_ids(id);
  treespec::ValidationContext ctx;
  ctx.vocab_size = 1000;
  ctx.max_context = 2048;
  ctx.drafters = {"ngram"};
  ctx.default_drafter = "none";
  ctx.default_tree = "auto";
  auto validated = treespec::ValidateRequest(generate, ctx);
  (void)validated;
  return 0;
}
