// config.json parsing: fields that change the math are read as transformers
// reads them (defaults per architecture included) or refused with an error
// naming the field; never ignored. The numbers themselves are checked against
// transformers in tests/golden/config_golden_test.cc.
#include <limits>
#include <string>

#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/safetensors.h"
#include "core/model/weight_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

nlohmann::json Base(const std::string& arch) {
  return {{"architectures", {arch}}, {"vocab_size", 64},         {"hidden_size", 32},
          {"intermediate_size", 48}, {"num_hidden_layers", 2},   {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 128}};
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
  return ParseModelConfig(j.dump(), "config.json");
}

void ExpectError(const nlohmann::json& j, absl::StatusCode code, const std::string& names) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(names)) << j.dump();
}

TEST(ModelConfigTest, RopeThetaFromEitherLayout) {
  nlohmann::json old_layout = Base("LlamaForCausalLM");
  old_layout["rope_theta"] = 500000.0;
  nlohmann::json new_layout = Base("LlamaForCausalLM");
  new_layout["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  for (const auto& j : {old_layout, new_layout}) {
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->llama.rope_theta, 500000.0) << j.dump();
    EXPECT_FALSE(c->llama.rope_scaling.has_value());
  }
  auto plain = Parse(Base("LlamaForCausalLM"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->llama.rope_theta, 10000.0);
}

TEST(ModelConfigTest, ScalingTypesReadFromRopeParametersAndRopeScaling) {
  for (const char* type : {"linear", "dynamic"}) {
    nlohmann::json n = Base("LlamaForCausalLM");
    n["rope_parameters"] = {{"rope_type", type}, {"rope_theta", 1000.0}, {"factor", 2.0}};
    nlohmann::json o = Base("LlamaForCausalLM");
    o["rope_theta"] = 1000.0;
    o["rope_scaling"] = {{"type", type}, {"factor", 2.0}};
    for (const auto& j : {n, o}) {
      auto c = Parse(j);
      ASSERT_TRUE(c.ok()) << c.status();
      ASSERT_TRUE(c->llama.rope_scaling.has_value()) << j.dump();
      EXPECT_EQ(c->llama.rope_scaling->type, type);
      EXPECT_EQ(c->llama.rope_scaling->factor, 2.0);
      EXPECT_EQ(c->llama.rope_theta, 1000.0);
    }
  }
  // linear divides every frequency by the factor.
  nlohmann::json j = Base("LlamaForCausalLM");
  auto plain = Parse(j);
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto linear = Parse(j);
  ASSERT_TRUE(plain.ok() && linear.ok());
  std::vector<float> a = plain->llama.InvFreq(), b = linear->llama.InvFreq();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(b[i], a[i] / 4.0f) << i;
}

TEST(ModelConfigTest, UnknownOrPartialRopeIsRefusedNamingIt) {
  nlohmann::json j = Base("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "su"}, {"factor", 2.0}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "rope type 'su'");
  j = Base("LlamaForCausalLM");
  j["rope_scaling"] = {{"type", "mrope"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "'mrope'");
  j = Base("LlamaForCausalLM");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "nested by layer type");
  j = Base("LlamaForCausalLM");
  j["partial_rotary_factor"] = 0.5;
  ExpectError(j, absl::StatusCode::kUnimplemented, "partial_rotary_factor");
  j = Base("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "longrope"},
                          {"short_factor", {1.0, 1.0}},
                          {"long_factor", {1.0, 1.0}}};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "short_factor");
  j = Base("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "linear"}};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "factor");
}

// Found while fuzzing config.json (tests/fuzz/model_config_fuzz harness): the
// RoPE object was copied before its type was checked, and copying a JSON
// value recurses once per level, so a 1000000-deep rope_scaling overflowed
// the stack; the error quoting a deep field did the same.
TEST(ModelConfigTest, DeeplyNestedFieldsAreErrorsNotCrashes) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const char* key : {"rope_scaling", "hidden_size"}) {
    nlohmann::json j = Base("LlamaForCausalLM");
    j.erase(key);
    std::string text = j.dump();
    text.insert(1, std::string("\"") + key + "\": " + deep + ", ");
    auto c = ParseModelConfig(text, "config.json");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(key));
  }
}

// Found by CI's fuzz run (model_config): a head_dim near 2^62 made InvFreq
// allocate 2^61 floats, and sizes near 2^63 overflowed NumParameters' int64
// products (undefined behaviour). Sizes are now bounded, and so is the
// parameter count they make.
TEST(ModelConfigTest, AbsurdSizesAreRefusedNamingTheField) {
  const int64_t huge = int64_t{1} << 62;
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "head_dim"}) {
    nlohmann::json j = Base("LlamaForCausalLM");
    j[key] = huge;
    ExpectError(j, absl::StatusCode::kInvalidArgument, key);
  }
  nlohmann::json mamba = {{"architectures", {"MambaForCausalLM"}}, {"vocab_size", 64},
                          {"hidden_size", 32}, {"num_hidden_layers", 2}};
  ASSERT_TRUE(Parse(mamba).ok()) << Parse(mamba).status();
  for (const char* key : {"hidden_size", "expand", "state_size", "time_step_rank"}) {
    nlohmann::json j = mamba;
    j[key] = std::numeric_limits<int64_t>::max();
    ExpectError(j, absl::StatusCode::kInvalidArgument, key);
  }
  // Each size allowed, the product not: 2^24 layers of 2^24-wide MLPs.
  nlohmann::json j = Base("LlamaForCausalLM");
  j["num_hidden_layers"] = int64_t{1} << 24;
  j["intermediate_size"] = int64_t{1} << 24;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "parameters");
  // The largest real shapes still parse (Llama 3.1 405B, a 256K vocabulary).
  j = Base("LlamaForCausalLM");
  j["hidden_size"] = 16384;
  j["intermediate_size"] = 53248;
  j["num_hidden_layers"] = 126;
  j["num_attention_heads"] = 128;
  j["num_key_value_heads"] = 8;
  j["vocab_size"] = 262144;
  auto big = Parse(j);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_GT(big->llama.NumParameters(), int64_t{400} * 1000 * 1000 * 1000);
}

TEST(ModelConfigTest, HiddenActOtherThanSiluIsRefused) {
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM"}) {
    nlohmann::json j = Base(arch);
    j["hidden_act"] = "gelu";
    ExpectError(j, absl::StatusCode::kUnimplemented, "hidden_act 'gelu'");
    j["hidden_act"] = "swish";  // ACT2FN's alias of SiLU
    EXPECT_TRUE(Parse(j).ok()) << arch;
  }
  nlohmann::json m = {{"architectures", {"MambaForCausalLM"}}, {"vocab_size", 64},
                      {"hidden_size", 32}, {"num_hidden_layers", 2}, {"hidden_act", "relu"}};
  ExpectError(m, absl::StatusCode::kUnimplemented, "hidden_act 'relu'");
  m["hidden_act"] = "silu";
  EXPECT_TRUE(Parse(m).ok());
}

TEST(ModelConfigTest, BiasesByArchitecture) {
  nlohmann::json j = Base("LlamaForCausalLM");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->llama.qkv_bias && c->llama.o_bias && c->llama.mlp_bias);
  auto q2 = Parse(Base("Qwen2ForCausalLM"));
  ASSERT_TRUE(q2.ok()) << q2.status();
  EXPECT_TRUE(q2->llama.qkv_bias);
  EXPECT_FALSE(q2->llama.o_bias || q2->llama.mlp_bias || q2->llama.qk_norm);
  auto q3 = Parse(Base("Qwen3ForCausalLM"));
  ASSERT_TRUE(q3.ok()) << q3.status();
  EXPECT_TRUE(q3->llama.qk_norm);
  EXPECT_EQ(q3->llama.head_dim, 128) << "Qwen3Config's default head_dim";
  EXPECT_FALSE(q3->llama.qkv_bias);
}

TEST(ModelConfigTest, SlidingWindowAsTransformersDefaultsIt) {
  nlohmann::json j = Base("MistralForCausalLM");
  auto missing = Parse(j);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->llama.sliding_window, 4096) << "MistralConfig's default";
  j["sliding_window"] = nullptr;
  auto none = Parse(j);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->llama.sliding_window.has_value());
  j["sliding_window"] = 0;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "sliding_window");

  nlohmann::json q = Base("Qwen2ForCausalLM");
  q["sliding_window"] = 64;  // ignored without use_sliding_window, as in transformers
  auto off = Parse(q);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->llama.sliding_window.has_value());
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 0;
  auto all = Parse(q);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->llama.sliding_window, 64);
  q["max_window_layers"] = 1;  // layer 0 full, layer 1 sliding
  ExpectError(q, absl::StatusCode::kUnimplemented, "max_window_layers / layer_types");
  q["layer_types"] = {"sliding_attention", "full_attention"};
  ExpectError(q, absl::StatusCode::kUnimplemented, "layer_types");
}

TEST(ModelConfigTest, ArchitecturesFromModelType) {
  for (auto [mt, arch] : {std::pair<const char*, const char*>{"qwen2", "Qwen2ForCausalLM"},
                          {"qwen3", "Qwen3ForCausalLM"},
                          {"mistral", "MistralForCausalLM"}}) {
    nlohmann::json j = Base("x");
    j.erase("architectures");
    j["model_type"] = mt;
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->architecture_name, arch);
  }
  ExpectError(Base("GemmaForCausalLM"), absl::StatusCode::kUnimplemented, "GemmaForCausalLM");
}

// dynamic and longrope change frequencies past a length in transformers
// depending on each call's length; treespec runs up to there and refuses past.
TEST(ModelConfigTest, DynamicAndLongropeRefusePositionsPastTheirLimit) {
  struct Case {
    const char* variant;
    int64_t limit;
  };
  for (Case c : {Case{"llama_dynamic", 64}, Case{"llama_longrope", 32}}) {
    SCOPED_TRACE(c.variant);
    const std::string dir = testing::SourceDir() + "/tests/golden/data/configs/" + c.variant;
    auto mc = LoadModelConfig(dir);
    ASSERT_TRUE(mc.ok()) << mc.status();
    EXPECT_EQ(mc->llama.MaxExactPosition(), c.limit);
    std::unique_ptr<Backend> backend = CreateCpuBackend();
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
    WeightLoader loader(ckpt->get(), backend.get());
    auto model = LlamaModel::Create(mc->llama, &loader, nullptr);
    ASSERT_TRUE(model.ok()) << model.status();
    auto cache = PagedKvCache::Create((*model)->KvOptions(64, 4), backend.get());
    ASSERT_TRUE(cache.ok());
    const int64_t seq = (*cache)->CreateSequence();
    ASSERT_TRUE((*cache)->Reserve(seq, c.limit + 1).ok());
    std::vector<int32_t> upto(c.limit, 5);
    ForwardOutput out;
    ASSERT_TRUE((*model)->Forward({{seq, upto, {}, LogitsMode::kLast}}, cache->get(), &out).ok());
    ASSERT_TRUE((*cache)->Commit(seq, c.limit).ok());
    absl::Status past = (*model)->Forward({{seq, {6}, {}, LogitsMode::kLast}}, cache->get(), &out);
    EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
    EXPECT_THAT(past.message(), HasSubstr(c.variant == std::string("llama_dynamic") ? "'dynamic'"
                                                                                     : "'longrope'"));
  }
}

}  // namespace
}  // namespace treespec
