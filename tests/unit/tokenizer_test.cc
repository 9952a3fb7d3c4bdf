// Tokenizers against goldens made by the reference implementations
// (tools/goldens/make_tokenizer_goldens.py: the sentencepiece library, and
// transformers/tokenizers for the tokenizer.json fixtures), the streaming
// detokenizer's contract, BOS/EOS configuration, and malformed files.
#include "core/tokenizer/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::string FixtureDir() { return testing::SourceDir() + "/tests/fixtures/tokenizers"; }

const json& Goldens() {
  static const json* goldens = [] {
    auto* j = new json(json::parse(ReadFile(FixtureDir() + "/goldens.json"), nullptr, false));
    return j;
  }();
  return *goldens;
}

// Escapes control and non-ASCII bytes so failures print readably.
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

std::vector<int32_t> Ids(const json& list) { return list.get<std::vector<int32_t>>(); }

std::string SentencePiecePath(const std::string& relative) {
  return testing::SharedModels() + "/" + relative;
}

std::string SkipMessage(const std::string& path) {
  return "needs " + path + " from ../shared/models, which is not there (point "
         "TREESPEC_SHARED_MODELS at a copy to run this test)";
}

// Loads the tokenizer a golden entry was made from; "" or a skip reason.
std::unique_ptr<Tokenizer> LoadGolden(const json& entry, std::string* skip) {
  std::string path;
  if (entry["kind"] == "sentencepiece") {
    path = SentencePiecePath(entry["model"].get<std::string>());
    if (!std::filesystem::exists(path)) {
      *skip = SkipMessage(path);
      return nullptr;
    }
  } else {
    path = FixtureDir() + "/" + entry["dir"].get<std::string>();
  }
  auto tok = LoadTokenizer(path);
  EXPECT_TRUE(tok.ok()) << path << ": " << tok.status();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// Streams `ids` through an IncrementalDetokenizer, checking every chunk is
// valid UTF-8; returns the concatenation.
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detok(&tok);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string chunk = detok.Push(ids[i]);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "chunk after id #" << i << " (" << ids[i]
                                    << ") is not valid UTF-8: " << Printable(chunk);
    text += chunk;
  }
  const std::string rest = detok.Finish();
  EXPECT_TRUE(IsValidUtf8(rest)) << "Finish() is not valid UTF-8: " << Printable(rest);
  return text + rest;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Goldens().is_discarded()) << "cannot parse " << FixtureDir() << "/goldens.json";
    ASSERT_EQ(Goldens()["format_version"], 1);
    ASSERT_TRUE(Goldens()["tokenizers"].contains(GetParam()));
    entry_ = &Goldens()["tokenizers"][GetParam()];
    ASSERT_GE((*entry_)["cases"].size(), 30u);
    ASSERT_GE((*entry_)["decode_cases"].size(), 40u);
    std::string skip;
    tok_ = LoadGolden(*entry_, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_NE(tok_, nullptr);
  }
  const json* entry_ = nullptr;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(GoldenTest, EncodeMatchesReference) {
  for (const json& c : (*entry_)["cases"]) {
    const std::string text = c["text"];
    auto ids = tok_->Encode(text, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << Printable(text) << ": " << ids.status();
    EXPECT_EQ(*ids, Ids(c["ids"])) << "text \"" << Printable(text) << "\", tokens "
                                   << c.value("tokens", json::array()).dump();
    auto with_special = tok_->Encode(text, /*add_special=*/true);
    ASSERT_TRUE(with_special.ok()) << with_special.status();
    EXPECT_EQ(*with_special, Ids(c["ids_with_special"])) << "text \"" << Printable(text) << "\"";
  }
}

TEST_P(GoldenTest, DecodeMatchesReference) {
  for (const json& c : (*entry_)["cases"]) {
    const std::string expected = c["decoded"];
    EXPECT_EQ(Printable(tok_->Decode(Ids(c["ids_with_special"]))), Printable(expected))
        << "text \"" << Printable(c["text"]) << "\"";
    const std::string plain = c.value("decoded_without_special", expected);
    EXPECT_EQ(Printable(tok_->Decode(Ids(c["ids"]))), Printable(plain))
        << "text \"" << Printable(c["text"]) << "\"";
  }
}

// Random ids, byte tokens and specials, including invalid UTF-8.
TEST_P(GoldenTest, DecodeOfArbitraryIdsMatchesReference) {
  for (const json& c : (*entry_)["decode_cases"]) {
    EXPECT_EQ(Printable(tok_->Decode(Ids(c["ids"]))), Printable(c["decoded"]))
        << "ids " << c["ids"].dump();
  }
}

TEST_P(GoldenTest, StreamingEqualsDecode) {
  for (const json& c : (*entry_)["cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids_with_special"]);
    EXPECT_EQ(Printable(Stream(*tok_, ids)), Printable(c["decoded"].get<std::string>()))
        << "text \"" << Printable(c["text"]) << "\"";
  }
  for (const json& c : (*entry_)["decode_cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    EXPECT_EQ(Printable(Stream(*tok_, ids)), Printable(tok_->Decode(ids))) << "ids " << c["ids"].dump();
  }
}

// The contract on many seeded random sequences (for SentencePiece this checks
// the detokenizer's rules against the library's own Decode).
TEST_P(GoldenTest, StreamingEqualsDecodeOnRandomIds) {
  std::mt19937 rng(1234);
  std::vector<int32_t> bytes_and_specials;
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->decode_rules().pieces[id].kind != DecodeRules::Piece::Kind::kText) {
      bytes_and_specials.push_back(id);
    }
  }
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + rng() % 24);
    for (int32_t& id : ids) {
      if (!bytes_and_specials.empty() && rng() % 2 == 0) {
        id = bytes_and_specials[rng() % bytes_and_specials.size()];
      } else {
        id = static_cast<int32_t>(rng() % (tok_->vocab_size() + 2));  // a few out of range
      }
    }
    std::string ids_text;
    for (int32_t id : ids) ids_text += std::to_string(id) + " ";
    const std::string decoded = tok_->Decode(ids);
    EXPECT_TRUE(IsValidUtf8(decoded)) << "ids " << ids_text;
    EXPECT_EQ(Printable(Stream(*tok_, ids)), Printable(decoded)) << "ids " << ids_text;
  }
}

TEST_P(GoldenTest, SpecialTokens) {
  EXPECT_EQ(tok_->bos_id(), (*entry_)["bos_id"].get<int32_t>());
  EXPECT_EQ(tok_->vocab_size(), (*entry_)["vocab_size"].get<int32_t>());
  if (entry_->contains("special_ids")) {
    for (int32_t id : Ids((*entry_)["special_ids"])) EXPECT_TRUE(tok_->IsSpecial(id)) << id;
  }
  if (entry_->contains("eos_ids")) {
    EXPECT_EQ(tok_->eos_ids(), Ids((*entry_)["eos_ids"]));
  }
  EXPECT_FALSE(tok_->IsSpecial(-1));
  EXPECT_FALSE(tok_->IsSpecial(tok_->vocab_size()));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest,
                         ::testing::Values("sp_tok512", "sp_tok105", "llama2_style",
                                           "metaspace_style", "gpt2_style", "llama3_style",
                                           "misc_style", "qwen2_style"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::unique_ptr<Tokenizer> MustLoad(const std::string& path) {
  auto tok = LoadTokenizer(path);
  EXPECT_TRUE(tok.ok()) << path << ": " << tok.status();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(TokenizerTest, EosIdsComeFromAllConfigFiles) {
  // tokenizer_config eos_token <|end_of_text|> (1001), then generation_config
  // [1001, 1004 <|eot_id|>], then config.json 1001.
  auto llama3 = MustLoad(FixtureDir() + "/llama3_style");
  ASSERT_NE(llama3, nullptr);
  EXPECT_EQ(llama3->eos_ids(), (std::vector<int32_t>{1001, 1004}));
  EXPECT_TRUE(llama3->IsEos(1004));
  EXPECT_EQ(llama3->bos_id(), 1000);
  auto llama2 = MustLoad(FixtureDir() + "/llama2_style");
  ASSERT_NE(llama2, nullptr);
  EXPECT_EQ(llama2->eos_ids(), (std::vector<int32_t>{2}));
  auto gpt2 = MustLoad(FixtureDir() + "/gpt2_style");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->eos_ids(), (std::vector<int32_t>{0}));
  EXPECT_EQ(gpt2->bos_id(), 0);
}

TEST(TokenizerTest, StreamsByteFallbackRun) {
  auto tok = MustLoad(FixtureDir() + "/llama2_style");
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("→", false);
  ASSERT_TRUE(ids.ok());
  // "▁" then <0xE2><0x86><0x92>: nothing is emitted while the character is partial.
  ASSERT_EQ(ids->size(), 4u);
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push((*ids)[0]), "");  // the leading space is stripped
  EXPECT_EQ(detok.Push((*ids)[1]), "");
  EXPECT_EQ(detok.Push((*ids)[2]), "");
  EXPECT_EQ(detok.Push((*ids)[3]), "");  // HF holds a byte run until it ends
  EXPECT_EQ(detok.Finish(), "→");
  EXPECT_EQ(tok->Decode(*ids), "→");
  // Once a normal token ends the run, the character comes out with it.
  auto more = tok->Encode("→ a", false);
  ASSERT_TRUE(more.ok());
  std::string streamed;
  IncrementalDetokenizer d2(tok.get());
  for (int32_t id : *more) streamed += d2.Push(id);
  EXPECT_EQ(streamed, "→ a");
  EXPECT_EQ(d2.Finish(), "");
}

TEST(TokenizerTest, StreamsSentencePieceBytesEagerly) {
  const std::string path = SentencePiecePath("stories260K/tok512.model");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << SkipMessage(path);
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("a→b", false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(tok.get());
  std::vector<std::string> chunks;
  for (int32_t id : *ids) chunks.push_back(detok.Push(id));
  chunks.push_back(detok.Finish());
  std::string all;
  for (const auto& c : chunks) all += c;
  EXPECT_EQ(all, "a→b");
  EXPECT_THAT(chunks, ::testing::Contains("→"));  // as soon as its last byte arrives
}

TEST(TokenizerTest, StreamingCleanUpHoldsBackOnlyWhatCanChange) {
  auto tok = MustLoad(FixtureDir() + "/llama3_style");
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("Hello , world ! Do n't stop", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(tok->Decode(*ids), "Hello, world! Don't stop");
  EXPECT_EQ(Stream(*tok, *ids), "Hello, world! Don't stop");
}

TEST(TokenizerTest, DetokenizerResetsAfterFinish) {
  auto tok = MustLoad(FixtureDir() + "/metaspace_style");
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("Hello world", true);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(tok.get());
  for (int round = 0; round < 2; ++round) {
    std::string text;
    for (int32_t id : *ids) text += detok.Push(id);
    text += detok.Finish();
    EXPECT_EQ(text, "Hello world") << "round " << round;  // leading space stripped again
  }
}

// The hand-written scanners on the cases their regexes are known for.
TEST(TokenizerTest, SplitRegexScanners) {
  auto pieces = [](SplitRegex re, const std::string& text) {
    std::vector<std::pair<size_t, size_t>> matches;
    FindRegexMatches(re, text, &matches);
    std::vector<std::string> out;
    for (const auto& [b, e] : matches) out.push_back(text.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitRegex::kGpt2, "I'm  here 12345!!\n\n"),
            (V{"I", "'m", " ", " here", " 12345", "!!", "\n\n"}));
  EXPECT_EQ(pieces(SplitRegex::kGpt2, "I'M"), (V{"I", "'", "M"}));
  EXPECT_EQ(pieces(SplitRegex::kLlama3, "I'M  here 12345!!\n\n x"),
            (V{"I", "'M", " ", " here", " ", "123", "45", "!!\n\n", " x"}));
  EXPECT_EQ(pieces(SplitRegex::kLlama3, "\tfoo \n \n  bar"),
            (V{"\tfoo", " \n \n", " ", " bar"}));
  EXPECT_EQ(pieces(SplitRegex::kQwen2, "x123"), (V{"x", "1", "2", "3"}));
}

TEST(TokenizerTest, RejectsInvalidUtf8) {
  auto tok = MustLoad(FixtureDir() + "/gpt2_style");
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode(std::string("ok\xE2\x82", 4), false);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("UTF-8"));
}

// A fixture's tokenizer.json in a temporary directory with the given configs.
void CopyFixture(const std::string& name, const std::string& dir) {
  WriteFile(dir + "/tokenizer.json", ReadFile(FixtureDir() + "/" + name + "/tokenizer.json"));
}

TEST(TokenizerTest, AddBosAddEosFromTokenizerConfig) {
  TempDir dir;
  CopyFixture("llama2_style", dir.path());
  WriteFile(dir.path() + "/tokenizer_config.json",
            R"({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>",
                "eos_token": {"content": "</s>", "special": true},
                "add_bos_token": false, "add_eos_token": true})");
  auto tok = MustLoad(dir.path());
  ASSERT_NE(tok, nullptr);
  auto plain = tok->Encode("Hi", false);
  auto special = tok->Encode("Hi", true);
  ASSERT_TRUE(plain.ok() && special.ok());
  std::vector<int32_t> expected = *plain;
  expected.push_back(2);
  EXPECT_EQ(*special, expected);

  // A non-Llama class: the flag overrides the (empty) post-processor.
  TempDir gpt2;
  CopyFixture("gpt2_style", gpt2.path());
  WriteFile(gpt2.path() + "/tokenizer_config.json",
            R"({"bos_token": "<|endoftext|>", "add_bos_token": true})");
  auto g = MustLoad(gpt2.path());
  ASSERT_NE(g, nullptr);
  auto gs = g->Encode("Hi", true);
  ASSERT_TRUE(gs.ok());
  ASSERT_FALSE(gs->empty());
  EXPECT_EQ((*gs)[0], 0);
}

// Found by tests/fuzz/tokenizer_config_fuzz: a mistyped field 1000000 levels
// deep was quoted with nlohmann's dump() (one recursion per level) and
// overflowed the stack instead of giving an error naming the field.
TEST(TokenizerTest, DeeplyNestedTokenizerConfigFieldsAreErrors) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const char* field : {"eos_token", "add_bos_token", "chat_template"}) {
    TempDir dir;
    CopyFixture("gpt2_style", dir.path());
    WriteFile(dir.path() + "/tokenizer_config.json",
              std::string("{\"") + field + "\": " + deep + "}");
    absl::Status s = std::string(field) == "chat_template"
                         ? ReadChatTemplate(dir.path()).status()
                         : ReadTokenizerConfig(dir.path()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(field)) << field;
    EXPECT_THAT(std::string(s.message()), HasSubstr("[[[[[...]]]]]")) << field;
  }
}

TEST(TokenizerTest, SentencePieceBosEosFromTokenizerConfig) {
  const std::string model = SentencePiecePath("stories260K/tok512.model");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << SkipMessage(model);
  TempDir dir;
  WriteFile(dir.path() + "/tokenizer.model", ReadFile(model));
  auto def = MustLoad(dir.path());
  ASSERT_NE(def, nullptr);
  auto ids = def->Encode("Hi", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 1);
  EXPECT_NE(ids->back(), 2);
  WriteFile(dir.path() + "/tokenizer_config.json",
            R"({"add_bos_token": false, "add_eos_token": true})");
  auto tok = MustLoad(dir.path());
  ASSERT_NE(tok, nullptr);
  auto with = tok->Encode("Hi", true);
  auto without = tok->Encode("Hi", false);
  ASSERT_TRUE(with.ok() && without.ok());
  std::vector<int32_t> expected = *without;
  expected.push_back(2);
  EXPECT_EQ(*with, expected);
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{2}));
}

absl::Status LoadStatus(const std::string& dir) { return LoadTokenizer(dir).status(); }

TEST(TokenizerTest, MissingFilesAreNotFound) {
  TempDir dir;
  EXPECT_EQ(LoadStatus(dir.path()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadStatus(dir.path() + "/nope").code(), absl::StatusCode::kNotFound);
}

TEST(TokenizerTest, MalformedTokenizerJsonNamesFileAndField) {
  const json base =
      json::parse(ReadFile(FixtureDir() + "/llama2_style/tokenizer.json"), nullptr, false);
  ASSERT_FALSE(base.is_discarded());
  struct Case {
    std::string name;
    std::function<void(json*)> mutate;
    absl::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"wordpiece", [](json* j) { (*j)["model"]["type"] = "WordPiece"; },
       absl::StatusCode::kUnimplemented, "model.type"},
      {"no model", [](json* j) { j->erase("model"); }, absl::StatusCode::kInvalidArgument,
       "'model'"},
      {"vocab not an object", [](json* j) { (*j)["model"]["vocab"] = 3; },
       absl::StatusCode::kInvalidArgument, "model.vocab"},
      {"bad merge", [](json* j) { (*j)["model"]["merges"][0] = json::array({"nope", "x"}); },
       absl::StatusCode::kInvalidArgument, "model.merges[0]"},
      {"merge string", [](json* j) { (*j)["model"]["merges"][3] = "a b c"; },
       absl::StatusCode::kInvalidArgument, "model.merges[3]"},
      {"huge id", [](json* j) { (*j)["model"]["vocab"]["x"] = 4000000000LL; },
       absl::StatusCode::kInvalidArgument, "model.vocab"},
      // Under the 2^24 cap but far past the entries (tokenizer_json_fuzz:
      // 1.1 GB of per-id tables from a 2.4 KB file).
      {"sparse vocab id", [](json* j) { (*j)["model"]["vocab"]["x"] = 15555551; },
       absl::StatusCode::kInvalidArgument, "model.vocab"},
      {"sparse added id", [](json* j) { (*j)["added_tokens"][0]["id"] = 15555551; },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].id"},
      {"unknown normalizer", [](json* j) { (*j)["normalizer"] = {{"type", "BertNormalizer"}}; },
       absl::StatusCode::kUnimplemented, "normalizer.type"},
      {"regex pattern",
       [](json* j) {
         (*j)["pre_tokenizer"] = {{"type", "Split"},
                                  {"pattern", {{"Regex", "\\w+"}}},
                                  {"behavior", "Isolated"}};
       },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.pattern.Regex"},
      {"unknown decoder", [](json* j) { (*j)["decoder"] = {{"type", "WordPiece"}}; },
       absl::StatusCode::kUnimplemented, "decoder"},
      {"added token", [](json* j) { (*j)["added_tokens"][0]["id"] = "one"; },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].id"},
      {"template", [](json* j) { (*j)["post_processor"]["special_tokens"] = json::object(); },
       absl::StatusCode::kInvalidArgument, "post_processor.special_tokens"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    json j = base;
    c.mutate(&j);
    WriteFile(dir.path() + "/tokenizer.json", j.dump());
    const absl::Status s = LoadStatus(dir.path());
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("tokenizer.json")) << c.name;
    EXPECT_THAT(s.message(), HasSubstr(c.field)) << c.name;
  }
}

TEST(TokenizerTest, TruncatedTokenizerJsonIsInvalidArgument) {
  for (const std::string name : {"llama2_style", "gpt2_style", "llama3_style"}) {
    const std::string text = ReadFile(FixtureDir() + "/" + name + "/tokenizer.json");
    TempDir dir;
    for (size_t len : {size_t{0}, size_t{1}, text.size() / 3, text.size() / 2, text.size() - 2}) {
      WriteFile(dir.path() + "/tokenizer.json", text.substr(0, len));
      const absl::Status s = LoadStatus(dir.path());
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " cut at " << len;
      EXPECT_THAT(s.message(), HasSubstr("tokenizer.json")) << name;
    }
  }
}

TEST(TokenizerTest, TruncatedSentencePieceModelIsInvalidArgument) {
  const std::string model = SentencePiecePath("stories260K/tok512.model");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << SkipMessage(model);
  const std::string bytes = ReadFile(model);
  TempDir dir;
  for (size_t len : {size_t{0}, size_t{7}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 3}) {
    WriteFile(dir.path() + "/tokenizer.model", bytes.substr(0, len));
    const absl::Status s = LoadStatus(dir.path());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "cut at " << len << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("tokenizer.model"));
  }
  WriteFile(dir.path() + "/tokenizer.model", std::string(200, '\xFF'));
  EXPECT_EQ(LoadStatus(dir.path()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerTest, MalformedConfigFilesNameTheField) {
  TempDir dir;
  CopyFixture("llama2_style", dir.path());
  WriteFile(dir.path() + "/tokenizer_config.json", R"({"bos_token": "<nope>"})");
  absl::Status s = LoadStatus(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("tokenizer_config.json"));
  EXPECT_THAT(s.message(), HasSubstr("bos_token"));

  WriteFile(dir.path() + "/tokenizer_config.json", R"({"add_bos_token": "yes"})");
  s = LoadStatus(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("add_bos_token"));

  WriteFile(dir.path() + "/tokenizer_config.json", "{}");
  WriteFile(dir.path() + "/generation_config.json", R"({"eos_token_id": [2, "x"]})");
  s = LoadStatus(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("generation_config.json"));
  EXPECT_THAT(s.message(), HasSubstr("eos_token_id"));

  WriteFile(dir.path() + "/generation_config.json", "{");
  s = LoadStatus(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("generation_config.json"));
}

TEST(TokenizerTest, LoadsSentencePieceFileDirectly) {
  const std::string model = SentencePiecePath("stories260K/tok512.model");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << SkipMessage(model);
  auto tok = MustLoad(model);
  ASSERT_NE(tok, nullptr);
  // ../shared/models/README.md: sp.encode of this sentence.
  auto ids = tok->Encode("Once upon a time, there was a little girl named Lily.", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                        421, 395, 317, 426}));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->IsSpecial(1));
  EXPECT_FALSE(tok->IsSpecial(300));
}

}  // namespace
}  // namespace treespec
