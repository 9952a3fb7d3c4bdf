// Config features read exactly (tests/golden/data/configs, made by
// tools/goldens/make_config_goldens.py from transformers): every RoPE type
// (default with its own theta, linear, dynamic, yarn with and without mscale,
// longrope, llama3), attention / MLP biases, Mistral's sliding window, Qwen2
// (q/k/v bias) and Qwen3 (q/k norm, explicit head_dim), each from a
// config.json in the transformers 5 layout (`rope_parameters`) and in the 4
// layout (`rope_theta` + `rope_scaling`).
//
// Checked: both layouts parse to the same model; RoPE frequencies and the
// attention factor equal transformers'; logits at every prompt position (one
// prefill, and chunks of 5 through the KV cache) are within the golden row
// error 1e-4 of transformers'; a token tree deeper than the sliding window, or
// on scaled RoPE, gives each node the logits of decoding its path alone.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/safetensors.h"
#include "core/model/weight_loader.h"
#include "core/util/status_macros.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"

namespace treespec {
namespace {

using ::treespec::testing::MaxRowRelError;

constexpr double kTolerance = 1e-4;

std::string VariantDir(const std::string& name) {
  return testing::SourceDir() + "/tests/golden/data/configs/" + name;
}

struct Variant {
  std::string dir;
  nlohmann::json manifest;
  std::vector<int32_t> prompt;
};

absl::StatusOr<Variant> LoadVariant(const std::string& name) {
  Variant v;
  v.dir = VariantDir(name);
  auto text = ReadFileToString(v.dir + "/manifest.json");
  if (!text.ok()) return text.status();
  v.manifest = nlohmann::json::parse(*text, nullptr, false);
  if (v.manifest.is_discarded() || v.manifest.value("format_version", -1) != 1) {
    return absl::FailedPreconditionError(v.dir + "/manifest.json: not format_version 1");
  }
  v.prompt = v.manifest["prompt_ids"].get<std::vector<int32_t>>();
  return v;
}

absl::StatusOr<LlamaConfig> ParseLayout(const Variant& v, const std::string& file) {
  auto text = ReadFileToString(v.dir + "/" + file);
  if (!text.ok()) return text.status();
  auto mc = ParseModelConfig(*text, file);
  if (!mc.ok()) return mc.status();
  if (mc->arch != Architecture::kLlama) return absl::InternalError("not a Llama-family config");
  if (mc->architecture_name != v.manifest["architecture"].get<std::string>()) {
    return absl::InternalError("architecture " + mc->architecture_name);
  }
  return mc->llama;
}

// One model (weights of `dir`, config `config`) with its own KV cache.
struct Runner {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<PagedKvCache> cache;
  int64_t vocab = 0;

  absl::Status Init(const std::string& dir, const LlamaConfig& config) {
    TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
    WeightLoader loader(ckpt.get(), backend.get());
    TS_ASSIGN_OR_RETURN(model, LlamaModel::Create(config, &loader, nullptr));
    TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
    TS_ASSIGN_OR_RETURN(cache, PagedKvCache::Create(model->KvOptions(64, 4), backend.get()));
    vocab = config.vocab_size;
    return absl::OkStatus();
  }

  // Feeds `tokens` in chunks of `chunk` to a new sequence; logits of every token.
  absl::StatusOr<std::vector<float>> Chain(const std::vector<int32_t>& tokens, size_t chunk) {
    const int64_t seq = cache->CreateSequence();
    std::vector<float> all;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
      std::vector<int32_t> c(tokens.begin() + at,
                             tokens.begin() + std::min(tokens.size(), at + chunk));
      TS_RETURN_IF_ERROR(cache->Reserve(seq, cache->length(seq) + c.size()));
      ForwardOutput out;
      TS_RETURN_IF_ERROR(model->Forward({{seq, c, {}, LogitsMode::kAll}}, cache.get(), &out));
      TS_RETURN_IF_ERROR(cache->Commit(seq, c.size()));
      all.insert(all.end(), out.logits.begin(), out.logits.end());
    }
    cache->Release(seq);
    return all;
  }
};

class ConfigGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigGoldenTest, BothLayoutsParseToTheSameModel) {
  auto v = LoadVariant(GetParam());
  ASSERT_TRUE(v.ok()) << v.status();
  auto c5 = ParseLayout(*v, "config.json");
  auto c4 = ParseLayout(*v, "config_v4.json");
  ASSERT_TRUE(c5.ok()) << c5.status();
  ASSERT_TRUE(c4.ok()) << c4.status();
  EXPECT_EQ(c5->rope_theta, c4->rope_theta);
  EXPECT_EQ(c5->rope_scaling.has_value(), c4->rope_scaling.has_value());
  EXPECT_EQ(c5->InvFreq(), c4->InvFreq());
  EXPECT_EQ(c5->RopeAttentionFactor(), c4->RopeAttentionFactor());
  EXPECT_EQ(c5->MaxExactPosition(), c4->MaxExactPosition());
  EXPECT_EQ(c5->sliding_window, c4->sliding_window);
  EXPECT_EQ(c5->head_dim, c4->head_dim);
  EXPECT_EQ(c5->qkv_bias, c4->qkv_bias);
  EXPECT_EQ(c5->o_bias, c4->o_bias);
  EXPECT_EQ(c5->mlp_bias, c4->mlp_bias);
  EXPECT_EQ(c5->qk_norm, c4->qk_norm);
  // The values each variant exists for.
  const std::string name = GetParam();
  if (name == "llama_theta") EXPECT_EQ(c5->rope_theta, 500.0);
  if (name == "mistral_window") EXPECT_EQ(c5->sliding_window, 5);
  if (name == "qwen2") EXPECT_TRUE(c5->qkv_bias && !c5->o_bias && !c5->qk_norm);
  if (name == "qwen3") EXPECT_TRUE(c5->qk_norm && c5->head_dim == 16 && !c5->qkv_bias);
  if (name == "llama_bias") EXPECT_TRUE(c5->qkv_bias && c5->o_bias && c5->mlp_bias);
  if (name.find("rope") != std::string::npos || name == "llama_linear" ||
      name == "llama_dynamic" || name.find("yarn") != std::string::npos || name == "llama3") {
    ASSERT_TRUE(c5->rope_scaling.has_value()) << name;
  }
}

TEST_P(ConfigGoldenTest, RopeMatchesTransformers) {
  auto v = LoadVariant(GetParam());
  ASSERT_TRUE(v.ok()) << v.status();
  auto ref = ReadNpy(v->dir + "/rope_inv_freq.npy");
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (const char* file : {"config.json", "config_v4.json"}) {
    auto c = ParseLayout(*v, file);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<float> inv = c->InvFreq();
    ASSERT_EQ(inv.size(), ref->f32.size()) << file;
    for (size_t i = 0; i < inv.size(); ++i) {
      // float32 on both sides; allow one or two ulps for pow/log differences.
      EXPECT_NEAR(inv[i], ref->f32[i], 4e-7 * std::fabs(ref->f32[i]))
          << GetParam() << " " << file << " inv_freq[" << i << "]";
    }
    EXPECT_NEAR(c->RopeAttentionFactor(), v->manifest["rope_attention_factor"].get<double>(),
                1e-12)
        << file;
  }
}

TEST_P(ConfigGoldenTest, LogitsMatchTransformersInBothLayouts) {
  auto v = LoadVariant(GetParam());
  ASSERT_TRUE(v.ok()) << v.status();
  for (auto [file, logits] : {std::pair<const char*, const char*>{"config.json", "logits_v5.npy"},
                              {"config_v4.json", "logits_v4.npy"}}) {
    auto c = ParseLayout(*v, file);
    ASSERT_TRUE(c.ok()) << c.status();
    Runner r;
    ASSERT_TRUE(r.Init(v->dir, *c).ok());
    auto ref = ReadNpy(v->dir + "/" + logits);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const int64_t L = static_cast<int64_t>(v->prompt.size());
    ASSERT_EQ(ref->shape, (std::vector<int64_t>{L, r.vocab}));
    for (size_t chunk : {v->prompt.size(), size_t{5}, size_t{1}}) {
      auto got = r.Chain(v->prompt, chunk);
      ASSERT_TRUE(got.ok()) << got.status();
      auto err = MaxRowRelError(got->data(), ref->f32.data(), L, r.vocab);
      EXPECT_LE(err.max_rel, kTolerance)
          << GetParam() << " " << file << " chunk " << chunk << ": " << err.Describe();
      std::printf("[golden] %s %s chunk %zu: max rel error %.3g\n", GetParam().c_str(), file,
                  chunk, err.max_rel);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ConfigGoldenTest,
                         ::testing::Values("llama_theta", "llama_linear", "llama_dynamic",
                                           "llama_yarn", "llama_yarn_mscale", "llama_longrope",
                                           "llama3", "llama_bias", "mistral_window", "qwen2",
                                           "qwen3"));

// Tree verification: after a committed prefix, a tree of depth 7 (deeper than
// Mistral's window of 5, so windows cut into both the prefix and the tree)
// gives every node the logits of its root-to-node path decoded as a chain.
class ConfigTreeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigTreeTest, TreeNodesMatchTheirPathsDecodedAlone) {
  auto v = LoadVariant(GetParam());
  ASSERT_TRUE(v.ok()) << v.status();
  auto c = ParseLayout(*v, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  Runner r;
  ASSERT_TRUE(r.Init(v->dir, *c).ok());
  const std::vector<int32_t> prefix(v->prompt.begin(), v->prompt.begin() + 9);
  //        0
  //       / \.
  //      1   2
  //      |   |
  //      3   4 - 5 - 7 - 9 - 11 - 12
  //      |       |
  //      6       8 - 10
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 4, 3, 5, 5, 7, 8, 9, 11};
  const std::vector<int32_t> tokens = {7, 12, 33, 41, 5, 60, 18, 27, 9, 50, 3, 44, 21};
  const int64_t seq = r.cache->CreateSequence();
  ASSERT_TRUE(r.cache->Reserve(seq, prefix.size() + tokens.size()).ok());
  ForwardOutput out;
  ASSERT_TRUE(r.model->Forward({{seq, prefix, {}, LogitsMode::kNone}}, r.cache.get(), &out).ok());
  ASSERT_TRUE(r.cache->Commit(seq, prefix.size()).ok());
  absl::Status st = r.model->Forward({{seq, tokens, parents, LogitsMode::kAll}}, r.cache.get(), &out);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(out.logits.size(), tokens.size() * r.vocab);
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> path;
    for (int n = static_cast<int>(node); n >= 0; n = parents[n]) path.insert(path.begin(), tokens[n]);
    std::vector<int32_t> chain = prefix;
    chain.insert(chain.end(), path.begin(), path.end());
    auto alone = r.Chain(chain, chain.size());
    ASSERT_TRUE(alone.ok()) << alone.status();
    auto err = MaxRowRelError(out.row_logits(node), alone->data() + (chain.size() - 1) * r.vocab,
                              1, r.vocab);
    EXPECT_LE(err.max_rel, 1e-6) << GetParam() << " node " << node << " (depth "
                                 << path.size() - 1 << "): " << err.Describe();
  }
}

// A drafter grows a tree level by level (num_prior > 0): the nodes written by
// earlier calls keep their depth positions for the window too.
TEST_P(ConfigTreeTest, TreeGrownOverTwoCallsEqualsOneCall) {
  auto v = LoadVariant(GetParam());
  ASSERT_TRUE(v.ok()) << v.status();
  auto c = ParseLayout(*v, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  Runner r;
  ASSERT_TRUE(r.Init(v->dir, *c).ok());
  const std::vector<int32_t> prefix(v->prompt.begin(), v->prompt.begin() + 7);
  const std::vector<int32_t> parents = {-1, 0, 1, 2, 2, 3, 5, 6, 4};
  const std::vector<int32_t> tokens = {8, 19, 23, 40, 2, 11, 57, 30, 14};
  const int first = 5;
  std::vector<float> logits[2];
  for (int split : {0, 1}) {
    const int64_t seq = r.cache->CreateSequence();
    ASSERT_TRUE(r.cache->Reserve(seq, prefix.size() + tokens.size()).ok());
    ForwardOutput out;
    ASSERT_TRUE(r.model->Forward({{seq, prefix, {}, LogitsMode::kNone}}, r.cache.get(), &out).ok());
    ASSERT_TRUE(r.cache->Commit(seq, prefix.size()).ok());
    if (split == 0) {
      ASSERT_TRUE(r.model->Forward({{seq, tokens, parents, LogitsMode::kAll}}, r.cache.get(), &out)
                      .ok());
      logits[0] = out.logits;
    } else {
      std::vector<int32_t> a(tokens.begin(), tokens.begin() + first);
      std::vector<int32_t> pa(parents.begin(), parents.begin() + first);
      ASSERT_TRUE(r.model->Forward({{seq, a, pa, LogitsMode::kAll}}, r.cache.get(), &out).ok());
      logits[1] = out.logits;
      std::vector<int32_t> b(tokens.begin() + first, tokens.end());
      ForwardSeq grow{seq, b, parents, LogitsMode::kAll, first};
      absl::Status st = r.model->Forward({grow}, r.cache.get(), &out);
      ASSERT_TRUE(st.ok()) << st;
      logits[1].insert(logits[1].end(), out.logits.begin(), out.logits.end());
    }
    r.cache->Release(seq);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  auto err = MaxRowRelError(logits[1].data(), logits[0].data(), tokens.size(), r.vocab);
  EXPECT_LE(err.max_rel, 1e-6) << GetParam() << ": " << err.Describe();
}

INSTANTIATE_TEST_SUITE_P(Variants, ConfigTreeTest,
                         ::testing::Values("mistral_window", "llama_yarn", "llama_longrope",
                                           "qwen3"));

}  // namespace
}  // namespace treespec
