// The real trained stories260K (../shared/models) through the whole path:
// build/bin/treespec-convert-llama2c turns the llama2.c checkpoint into a
// Hugging Face directory, treespec loads it, and its greedy output equals both
// transformers' (tests/golden/data/stories260K, made from the same converter's
// output) and the reference decode in ../shared/models/README.md.
//
// Suites named Shared* need ../shared/models and skip without it (ctest label
// `shared` by name). Llama2cConverter* checks the converter's error handling on
// synthetic files and always runs.
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/llama.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_data.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::treespec::testing::Argmax;
using ::treespec::testing::GoldenPrompt;
using ::treespec::testing::GoldenSet;
using ::treespec::testing::LoadGoldenSet;
using ::treespec::testing::MaxRowRelError;
using ::treespec::testing::ReadFile;
using ::treespec::testing::ReadGoldenNpy;
using ::treespec::testing::TempDir;

// ../shared/models/README.md, "Greedy reference outputs", stories260K: BOS then
// "Once upon a time, there was a little girl named Lily. She loved to play
// outside in the park. One day, she saw a big, r".
const std::vector<int32_t> kReadmeReference = {
    1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
    317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265,
    282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352};

std::string Converter() { return testing::BinaryDir() + "/bin/treespec-convert-llama2c"; }

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs the converter with `args`, capturing stdout and stderr.
RunResult RunConverter(const std::vector<std::string>& args, const std::string& log) {
  std::string cmd = "'" + Converter() + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " > '" + log + "' 2>&1";
  RunResult r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = ReadFile(log);
  return r;
}

std::vector<int32_t> Greedy(LlamaModel* model, PagedKvCache* cache,
                            const std::vector<int32_t>& prompt, int n) {
  const int64_t V = model->config().vocab_size;
  int64_t seq = cache->CreateSequence();
  EXPECT_TRUE(cache->Reserve(seq, prompt.size() + n).ok());
  std::vector<int32_t> feed = prompt, out;
  for (int i = 0; i < n; ++i) {
    ForwardSeq s;
    s.kv_seq = seq;
    s.tokens = feed;
    s.logits = LogitsMode::kLast;
    ForwardOutput fo;
    absl::Status st = model->Forward({s}, cache, &fo);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    EXPECT_TRUE(cache->Commit(seq, feed.size()).ok());
    out.push_back(Argmax(fo.row_logits(0), V));
    feed = {out.back()};
  }
  cache->Release(seq);
  return out;
}

class SharedStories260K : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::HaveSharedModels()) return;
    dir_ = new TempDir();
    model_dir_ = new std::string(dir_->path() + "/stories260K-hf");
    const std::string src = testing::SharedModels() + "/stories260K/";
    result_ =
        new RunResult(RunConverter({src + "stories260K.bin", src + "tok512.model", *model_dir_},
                                   dir_->path() + "/convert.log"));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete model_dir_;
    delete dir_;
    result_ = nullptr;
    model_dir_ = nullptr;
    dir_ = nullptr;
  }

  void SetUp() override {
    if (!testing::HaveSharedModels()) {
      GTEST_SKIP() << "../shared/models is absent (looked for " << testing::SharedModels()
                   << "/stories260K/stories260K.bin; set TREESPEC_SHARED_MODELS to override)";
    }
    ASSERT_TRUE(std::filesystem::exists(Converter()))
        << Converter() << " is not built (ninja treespec-convert-llama2c)";
    ASSERT_EQ(result_->exit_code, 0) << result_->output;
    auto golden = LoadGoldenSet("stories260K");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = std::move(*golden);
    ASSERT_EQ(golden_.prompts.size(), 2u);
    backend_ = CreateCpuBackend();
  }

  void LoadModel() {
    auto model = LlamaModel::Load(*model_dir_, backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto cache = PagedKvCache::Create(model_->KvOptions(/*num_blocks=*/16, /*block_size=*/16),
                                      backend_.get());
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }

  static TempDir* dir_;
  static std::string* model_dir_;
  static RunResult* result_;
  GoldenSet golden_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
};

TempDir* SharedStories260K::dir_ = nullptr;
std::string* SharedStories260K::model_dir_ = nullptr;
RunResult* SharedStories260K::result_ = nullptr;

TEST_F(SharedStories260K, ConverterWritesAHuggingFaceDirectory) {
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.model", "tokenizer_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(*model_dir_ + "/" + f)) << f;
  }
  auto mc = LoadModelConfig(*model_dir_);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const LlamaConfig& c = mc->llama;
  EXPECT_EQ(mc->architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(mc->bos_token_id, 1);
  EXPECT_EQ(mc->eos_token_ids, std::vector<int64_t>{2});
  auto tok = nlohmann::json::parse(ReadFile(*model_dir_ + "/tokenizer_config.json"));
  EXPECT_EQ(tok["add_bos_token"], true);
  EXPECT_EQ(tok["add_eos_token"], false);
  EXPECT_EQ(ReadFile(*model_dir_ + "/tokenizer.model"),
            ReadFile(testing::SharedModels() + "/stories260K/tok512.model"));
}

TEST_F(SharedStories260K, GreedyFromBosMatchesReadmeAndTransformers) {
  LoadModel();
  const GoldenPrompt& p = golden_.prompts[0];
  ASSERT_EQ(p.ids, std::vector<int32_t>{1});
  std::vector<int32_t> got = Greedy(model_.get(), cache_.get(), p.ids, p.greedy_new_ids.size());
  EXPECT_EQ(got, p.greedy_new_ids) << "vs transformers";
  got.insert(got.begin(), 1);
  EXPECT_EQ(got, kReadmeReference) << "vs ../shared/models/README.md";
}

TEST_F(SharedStories260K, TextPromptMatchesTransformers) {
  LoadModel();
  const GoldenPrompt& p = golden_.prompts[1];
  auto ref = ReadGoldenNpy(golden_, p.logits);
  ASSERT_TRUE(ref.ok()) << ref.status();
  int64_t seq = cache_->CreateSequence();
  ASSERT_TRUE(cache_->Reserve(seq, p.ids.size()).ok());
  ForwardSeq s;
  s.kv_seq = seq;
  s.tokens = p.ids;
  s.logits = LogitsMode::kAll;
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({s}, cache_.get(), &fo).ok());
  cache_->Release(seq);
  ASSERT_EQ(fo.logits.size(), ref->f32.size());
  // Row error max_v |a − ref| / max_v |ref| per position (golden_data.h).
  auto err = MaxRowRelError(fo.logits.data(), ref->f32.data(), p.ids.size(), 512);
  EXPECT_LE(err.max_rel, 1e-4) << err.Describe();
  std::printf("[golden] stories260K text-prompt logits: max rel error %.3g\n", err.max_rel);
  EXPECT_EQ(Greedy(model_.get(), cache_.get(), p.ids, p.greedy_new_ids.size()), p.greedy_new_ids);
}

TEST_F(SharedStories260K, ConverterRejectsAMismatchedTokenizer) {
  const std::string tok = testing::SharedModels() + "/babyllama-tok105/tok105.model";
  if (!std::filesystem::exists(tok)) GTEST_SKIP() << tok << " is absent";
  TempDir out;
  RunResult r = RunConverter(
      {testing::SharedModels() + "/stories260K/stories260K.bin", tok, out.path() + "/m"},
      out.path() + "/log");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(tok), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("105"), std::string::npos) << r.output;
}

// A second llama2.c checkpoint with other geometry (dim 128, head size 16,
// vocab 105): the converted model reproduces README.md's greedy reference.
TEST(SharedBabyLlama, ConvertedGreedyFromBosMatchesReadme) {
  if (!testing::HaveSharedModels()) GTEST_SKIP() << "../shared/models is absent";
  const std::string src = testing::SharedModels() + "/babyllama-tok105/";
  if (!std::filesystem::exists(src + "model5000.bin")) GTEST_SKIP() << src << " is absent";
  ASSERT_TRUE(std::filesystem::exists(Converter())) << Converter() << " is not built";
  const std::vector<int32_t> reference = {
      1,  3, 34, 9, 22, 4,  3,  18, 20, 7,  9,  3,  5,  3, 6,  10, 16, 4, 25, 3,  6,
      8,  4, 13, 4, 3,  17, 5,  12, 3,  5,  3,  14, 10, 6, 6,  14, 4,  3, 21, 10, 13,
      14, 3, 9,  5, 16, 4,  11, 3,  31, 10, 14, 15, 19, 3, 30, 8,  4,  3, 14};
  TempDir dir;
  RunResult r = RunConverter({src + "model5000.bin", src + "tok105.model", dir.path() + "/m"},
                             dir.path() + "/log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto backend = CreateCpuBackend();
  auto model = LlamaModel::Load(dir.path() + "/m", backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto cache = PagedKvCache::Create((*model)->KvOptions(8, 16), backend.get());
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::vector<int32_t> got = Greedy(model->get(), cache->get(), {1}, reference.size() - 1);
  got.insert(got.begin(), 1);
  EXPECT_EQ(got, reference);
}

// ---- converter errors on synthetic files (no shared models needed) ----------

class Llama2cConverterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(Converter()))
        << Converter() << " is not built (ninja treespec-convert-llama2c)";
  }
  // Writes a llama2.c file: header then `num_floats` zeros.
  std::string WriteBin(const std::vector<int32_t>& header, int64_t num_floats) {
    std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    bytes.append(num_floats * 4, '\0');
    const std::string path = dir_.path() + "/model.bin";
    testing::WriteFile(path, bytes);
    return path;
  }
  RunResult Run(const std::string& bin) {
    return RunConverter({bin, dir_.path() + "/missing.model", dir_.path() + "/out"},
                        dir_.path() + "/log");
  }
  TempDir dir_;
};

TEST_F(Llama2cConverterTest, HelpExitsZero) {
  RunResult r = RunConverter({"--help"}, dir_.path() + "/log");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("usage: treespec-convert-llama2c"), std::string::npos) << r.output;
  EXPECT_EQ(RunConverter({}, dir_.path() + "/log").exit_code, 2);
}

TEST_F(Llama2cConverterTest, TruncatedHeaderNamesTheFile) {
  const std::string bin = WriteBin({64, 172, 5}, 0);
  RunResult r = Run(bin);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bin), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated header"), std::string::npos) << r.output;
}

TEST_F(Llama2cConverterTest, BadHeaderNamesTheFileAndFields) {
  const std::string bin = WriteBin({64, 172, 5, 7, 4, 512, 512}, 16);  // 7 heads: 64 % 7 != 0
  RunResult r = Run(bin);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bin), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_heads=7"), std::string::npos) << r.output;
}

TEST_F(Llama2cConverterTest, VersionedExportIsRefused) {
  const std::string bin = WriteBin({0x616b3432, 1, 64, 172, 5, 8, 4}, 16);
  RunResult r = Run(bin);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("legacy"), std::string::npos) << r.output;
}

TEST_F(Llama2cConverterTest, TruncatedWeightsNameTheFile) {
  // dim 8, hidden 12, 1 layer, 2 heads, 1 kv head, vocab 16, seq_len 4 needs
  // 16·8 + 8 + 64 + 2·4·8 + 64 + 8 + 3·12·8 + 8 + 4·4 = 648 floats.
  const std::string bin = WriteBin({8, 12, 1, 2, 1, 16, 4}, 600);
  RunResult r = Run(bin);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bin), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(28 + 648 * 4)), std::string::npos) << r.output;
}

TEST_F(Llama2cConverterTest, MissingTokenizerNamesTheFile) {
  const std::string bin = WriteBin({8, 12, 1, 2, 1, 16, 4}, 648);
  RunResult r = Run(bin);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir_.path() + "/missing.model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace treespec
