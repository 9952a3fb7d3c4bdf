// libFuzzer target: GenerateRequest bytes as the gRPC edge receives them,
// parsed as the proto and run through the coordinator's ValidateRequest with
// a text tokenizer (tests/fixtures/tokenizers/gpt2_style), two drafters and
// the coordinator's default limits. Every error must be a clean Status.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>

#include "coordinator/validate.h"
#include "core/tokenizer/tokenizer.h"
#include "google/protobuf/stubs/logging.h"
#include "treespec/v1/generation.pb.h"

namespace {

const treespec::ValidationContext& Context() {
  static const treespec::ValidationContext* ctx = [] {
    static std::unique_ptr<treespec::Tokenizer> tok;
    auto loaded = treespec::LoadTokenizer(TREESPEC_SOURCE_DIR "/tests/fixtures/tokenizers/gpt2_style");
    if (!loaded.ok()) {
      std::fprintf(stderr, "fixture tokenizer: %s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    tok = std::move(*loaded);
    auto* c = new treespec::ValidationContext;
    c->tokenizer = tok.get();
    c->vocab_size = tok->vocab_size();
    c->max_context = 2048;
    c->eos_token_ids = tok->eos_ids();
    c->drafters = {"mamba", "ngram"};
    c->default_drafter = "mamba";
    c->default_tree = "auto";
    c->max_tree_nodes = 64;
    c->default_max_tokens = 128;
    return c;
  }();
  return *ctx;
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses to parse;
// at thousands of inputs a second that is only noise.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  treespec::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto validated = treespec::ValidateRequest(req, Context());
  (void)validated;
  return 0;
}
