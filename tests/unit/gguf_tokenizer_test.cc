// The tokenizer built from GGUF metadata (core/tokenizer/gguf_tokenizer.h) on
// small synthetic files: a byte-level BPE vocabulary with merges and control
// tokens, a SentencePiece-style vocabulary with byte fallback, and every
// malformed tokenizer key, which must be refused naming the key.
#include "core/tokenizer/gguf_tokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gguf_builder.h"

namespace treespec {
namespace {

using ::treespec::testing::GgufBuilder;

absl::StatusOr<std::shared_ptr<const GgufFile>> ParseImage(const std::string& image) {
  auto owned = std::make_shared<std::string>(image);
  return GgufFile::Parse(owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size(),
                         "tok.gguf");
}

// Byte-level: "Ġ" is the byte-level form of a space.
GgufBuilder Gpt2Builder(const std::string& pre = "smollm") {
  GgufBuilder b;
  b.StrKv("tokenizer.ggml.model", "gpt2")
      .StrKv("tokenizer.ggml.pre", pre)
      .StrArrayKv("tokenizer.ggml.tokens",
                  {"<|endoftext|>", "h", "e", "l", "o", "Ġ", "1", "2", "he", "ll", "hell", "hello",
                   "Ġhello", "12"})
      .I32ArrayKv("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
      .StrArrayKv("tokenizer.ggml.merges",
                  {"h e", "l l", "he ll", "hell o", "Ġ hello", "1 2"})
      .U32Kv("tokenizer.ggml.bos_token_id", 0)
      .U32Kv("tokenizer.ggml.eos_token_id", 0);
  return b;
}

TEST(GgufTokenizerTest, Gpt2VocabularyEncodesWithMergesAndPreTokenizer) {
  auto f = ParseImage(Gpt2Builder().Build());
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = LoadGgufTokenizer(**f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 14);
  auto ids = (*tok)->Encode("hello hello<|endoftext|>", false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{11, 12, 0}));
  // smollm splits digits one by one, so the "1 2" merge never applies.
  auto digits = (*tok)->Encode("12", false);
  ASSERT_TRUE(digits.ok());
  EXPECT_EQ(*digits, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ((*tok)->Decode({11, 12, 0}), "hello hello");
  EXPECT_TRUE((*tok)->IsSpecial(0));
  // The GPT-2 pre-tokenizer keeps digits together, so the merge applies.
  auto f2 = ParseImage(Gpt2Builder("gpt2").Build());
  ASSERT_TRUE(f2.ok());
  auto tok2 = LoadGgufTokenizer(**f2);
  ASSERT_TRUE(tok2.ok()) << tok2.status();
  EXPECT_EQ(*(*tok2)->Encode("12", false), (std::vector<int32_t>{13}));
}

TEST(GgufTokenizerTest, LlamaVocabularyIsSentencePieceWithByteFallback) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
    scores.push_back(0);
  }
  for (const char* p : {"\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi"}) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(-static_cast<float>(tokens.size()));
  }
  GgufBuilder b;
  b.StrKv("tokenizer.ggml.model", "llama")
      .StrArrayKv("tokenizer.ggml.tokens", tokens)
      .F32ArrayKv("tokenizer.ggml.scores", scores)
      .I32ArrayKv("tokenizer.ggml.token_type", types)
      .U32Kv("tokenizer.ggml.bos_token_id", 1)
      .U32Kv("tokenizer.ggml.eos_token_id", 2)
      .U32Kv("tokenizer.ggml.unknown_token_id", 0)
      .U32Kv("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
  auto f = ParseImage(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = LoadGgufTokenizer(**f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 1);
  auto ids = (*tok)->Encode("hi!", true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // BOS, "▁hi", then "!" (0x21) through byte fallback.
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 263, 3 + 0x21}));
  EXPECT_EQ((*tok)->Decode(*ids), "hi!");
}

TEST(GgufTokenizerTest, MalformedTokenizerKeysAreRefusedByName) {
  struct Case {
    GgufBuilder b;
    absl::StatusCode code;
    const char* needle;
  };
  std::vector<Case> cases;
  cases.push_back({Gpt2Builder().StrKv("tokenizer.ggml.model", "rwkv"),
                   absl::StatusCode::kInvalidArgument, "duplicate metadata key"});
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "rwkv").StrArrayKv("tokenizer.ggml.tokens", {"a"});
    cases.push_back({b, absl::StatusCode::kUnimplemented, "'tokenizer.ggml.model' = \"rwkv\""});
  }
  cases.push_back({Gpt2Builder("falcon"), absl::StatusCode::kUnimplemented,
                   "'tokenizer.ggml.pre' = \"falcon\""});
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "gpt2")
        .StrArrayKv("tokenizer.ggml.tokens", {"a", "b"})
        .I32ArrayKv("tokenizer.ggml.token_type", {1})
        .StrArrayKv("tokenizer.ggml.merges", {});
    cases.push_back({b, absl::StatusCode::kInvalidArgument,
                     "'tokenizer.ggml.token_type' has 1 entries but there are 2 tokens"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "gpt2")
        .StrArrayKv("tokenizer.ggml.tokens", {"a", "b", "ab"})
        .StrArrayKv("tokenizer.ggml.merges", {"ab"});
    cases.push_back({b, absl::StatusCode::kInvalidArgument,
                     "'tokenizer.ggml.merges' [0] = \"ab\" is not two tokens"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "gpt2")
        .StrArrayKv("tokenizer.ggml.tokens", {"a", "a"})
        .StrArrayKv("tokenizer.ggml.merges", {});
    cases.push_back({b, absl::StatusCode::kInvalidArgument, "repeats token 0"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "gpt2")
        .StrArrayKv("tokenizer.ggml.tokens", {"a"})
        .StrArrayKv("tokenizer.ggml.merges", {})
        .U32Kv("tokenizer.ggml.eos_token_id", 7);
    cases.push_back({b, absl::StatusCode::kInvalidArgument,
                     "'tokenizer.ggml.eos_token_id' = 7 is outside the vocabulary"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "gpt2").StrArrayKv("tokenizer.ggml.tokens", {"a"});
    cases.push_back({b, absl::StatusCode::kNotFound, "'tokenizer.ggml.merges' is missing"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "llama")
        .StrArrayKv("tokenizer.ggml.tokens", {"<unk>", "a"})
        .F32ArrayKv("tokenizer.ggml.scores", {0});
    cases.push_back({b, absl::StatusCode::kInvalidArgument,
                     "'tokenizer.ggml.scores' has 1 entries but there are 2 tokens"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "llama")
        .StrArrayKv("tokenizer.ggml.tokens", {"<unk>", "a"})
        .F32ArrayKv("tokenizer.ggml.scores", {0, 0})
        .I32ArrayKv("tokenizer.ggml.token_type", {1, 1});
    cases.push_back({b, absl::StatusCode::kInvalidArgument, "exactly one UNKNOWN"});
  }
  {
    GgufBuilder b;
    b.StrKv("tokenizer.ggml.model", "llama")
        .StrArrayKv("tokenizer.ggml.tokens", {"<unk>"})
        .I32ArrayKv("tokenizer.ggml.token_type", {9});
    cases.push_back({b, absl::StatusCode::kInvalidArgument, "[0] = 9 is not a token type"});
  }
  cases.push_back({GgufBuilder(), absl::StatusCode::kNotFound, "'tokenizer.ggml.model'"});
  for (Case& c : cases) {
    auto f = ParseImage(c.b.Build());
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), c.code) << f.status();
      EXPECT_NE(f.status().message().find(c.needle), std::string::npos) << f.status();
      continue;
    }
    auto tok = LoadGgufTokenizer(**f);
    ASSERT_FALSE(tok.ok()) << c.needle;
    EXPECT_EQ(tok.status().code(), c.code) << tok.status();
    EXPECT_NE(tok.status().message().find(c.needle), std::string::npos) << tok.status();
    EXPECT_NE(tok.status().message().find("tok.gguf"), std::string::npos) << tok.status();
  }
}

TEST(GgufTokenizerTest, ChatTemplateIsExposed) {
  auto f = ParseImage(Gpt2Builder().StrKv("tokenizer.chat_template", "{{ x }}").Build());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*GgufChatTemplate(**f), "{{ x }}");
  auto g = ParseImage(Gpt2Builder().Build());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*GgufChatTemplate(**g), "");
}

}  // namespace
}  // namespace treespec
