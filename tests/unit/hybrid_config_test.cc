// Mamba2ForCausalLM and BambaForCausalLM config.json parsing: the fixtures'
// fields as transformers 5 reads them, both time_step_limit spellings
// (transformers 4's bare Infinity, 5's {"__float__": ...}), and every field
// that changes the math in a way treespec does not compute refused by name;
// checkpoints that do not fit are errors naming the tensor.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/config_fields.h"
#include "core/model/hybrid.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

nlohmann::json Mamba2() {
  return {{"architectures", {"Mamba2ForCausalLM"}}, {"vocab_size", 64}, {"hidden_size", 32},
          {"num_hidden_layers", 2}, {"num_heads", 4}, {"head_dim", 16}, {"state_size", 8},
          {"n_groups", 2}, {"expand", 2}};
}

nlohmann::json Bamba() {
  return {{"architectures", {"BambaForCausalLM"}}, {"vocab_size", 64}, {"hidden_size", 32},
          {"intermediate_size", 48}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"attn_layer_indices", {1}}, {"mamba_n_heads", 4},
          {"mamba_d_head", "auto"}, {"mamba_n_groups", 1}, {"mamba_d_state", 8}};
}

absl::StatusOr<ModelConfig> Parse(const std::string& text) {
  return ParseModelConfig(text, "config.json");
}

void ExpectError(const nlohmann::json& j, absl::StatusCode code, const std::string& names) {
  auto c = Parse(j.dump());
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(names)) << j.dump();
}

TEST(HybridConfigTest, FixturesParseAsTransformersReadsThem) {
  auto m = LoadModelConfig(testing::SourceDir() + "/tests/fixtures/models/tiny_mamba2");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->arch, Architecture::kMamba2);
  const HybridConfig& c = m->hybrid;
  EXPECT_EQ(c.layout, HybridConfig::Layout::kMamba2);
  EXPECT_EQ(c.ssm_heads, 8);
  EXPECT_EQ(c.ssm_head_dim, 16);
  EXPECT_EQ(c.ssm_groups, 2);
  EXPECT_EQ(c.conv_dim(), 128 + 2 * 2 * 16);
  EXPECT_EQ(c.num_attention_layers(), 0);
  EXPECT_FALSE(c.has_mlp);
  EXPECT_EQ(m->vocab_size(), 128);
  auto b = LoadModelConfig(testing::SourceDir() + "/tests/fixtures/models/tiny_bamba");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->arch, Architecture::kHybrid);
  const HybridConfig& h = b->hybrid;
  EXPECT_EQ(h.attention, (std::vector<bool>{false, true, false}));
  EXPECT_TRUE(h.has_mlp);
  EXPECT_EQ(h.ssm_inner(), 64);
  EXPECT_EQ(h.attn.head_dim, 16);
  EXPECT_EQ(h.attn.RotaryDim(), 8);  // partial_rotary_factor 0.5
  const std::vector<float> inv = h.attn.InvFreq();
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_FLOAT_EQ(inv[1], 0.1f);  // 1 / 10000^(2/8)
  EXPECT_GT(h.NumParameters(), 0);
}

TEST(HybridConfigTest, TimeStepLimitInBothSpellingsAndOnlyZeroToInfinity) {
  // transformers 4 writes Infinity bare, which JSON does not allow.
  std::string v4 = Mamba2().dump();
  v4.insert(v4.size() - 1, ",\"time_step_limit\":[0.0,Infinity],\"note\":\"Infinity NaN\"");
  auto c = Parse(v4);
  ASSERT_TRUE(c.ok()) << c.status();
  nlohmann::json v5 = Mamba2();
  v5["time_step_limit"] = {0.0, {{"__float__", "Infinity"}}};
  EXPECT_TRUE(Parse(v5.dump()).ok());
  nlohmann::json clamped = Mamba2();
  clamped["time_step_limit"] = {0.001, 0.1};
  ExpectError(clamped, absl::StatusCode::kUnimplemented, "time_step_limit");
  nlohmann::json bamba = Bamba();
  bamba["time_step_limit"] = {0.0, 1.0};
  ExpectError(bamba, absl::StatusCode::kUnimplemented, "time_step_limit");
  EXPECT_EQ(config_detail::NormalizeNonFiniteJson("{\"a\":\"Infinity\\\"NaN\",\"b\":-Infinity}"),
            "{\"a\":\"Infinity\\\"NaN\",\"b\":{\"__float__\": \"-Infinity\"}}");
}

TEST(HybridConfigTest, FieldsThatChangeTheMathAreRefusedByName) {
  nlohmann::json j = Mamba2();
  j["hidden_act"] = "gelu";
  ExpectError(j, absl::StatusCode::kUnimplemented, "hidden_act");
  j = Mamba2();
  j["expand"] = 1;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "expand");
  j = Mamba2();
  j["n_groups"] = 3;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "n_groups");
  j = Mamba2();
  j["num_heads"] = 1 << 30;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "num_heads");
  j = Bamba();
  j["mamba_d_head"] = 7;
  ExpectError(j, absl::StatusCode::kInvalidArgument, "mamba_d_head");
  j = Bamba();
  j["attn_layer_indices"] = {1, 3};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "attn_layer_indices");
  j = Bamba();
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 1.0}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "partial_rotary_factor");
  j = Bamba();
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "partial rotary");
  j = Bamba();
  j["head_dim"] = 6;  // half of it, 3 columns, cannot rotate in pairs
  ExpectError(j, absl::StatusCode::kInvalidArgument, "head_dim");
}

TEST(HybridConfigTest, ModelTypesNameTheArchitectures) {
  nlohmann::json m = Mamba2();
  m.erase("architectures");
  m["model_type"] = "mamba2";
  auto c = Parse(m.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture_name, "Mamba2ForCausalLM");
  nlohmann::json b = Bamba();
  b.erase("architectures");
  b["model_type"] = "bamba";
  c = Parse(b.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Architecture::kHybrid);
  // Llama-family models still refuse partial rotary.
  nlohmann::json llama = {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 64},
                          {"hidden_size", 32}, {"intermediate_size", 48},
                          {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                          {"partial_rotary_factor", 0.5}};
  ExpectError(llama, absl::StatusCode::kUnimplemented, "partial_rotary_factor");
}

// A checkpoint that does not match its config is an error naming the tensor.
TEST(HybridConfigTest, LoadingErrorsNameTheTensor) {
  const std::string fixtures = testing::SourceDir() + "/tests/fixtures/models/";
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/config.json", testing::ReadFile(fixtures + "tiny_mamba2/config.json"));
  testing::WriteFile(dir.path() + "/model.safetensors",
                     testing::ReadFile(fixtures + "tiny_bamba/model.safetensors"));
  auto m = HybridModel::Load(dir.path(), backend.get());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("backbone.embeddings.weight"));
  // The right names with a wrong shape: 7 heads' worth of dt_bias.
  std::map<std::string, testing::TestTensor> tensors;
  tensors["backbone.embeddings.weight"] = testing::F32Tensor({128, 64}, std::vector<float>(128 * 64));
  tensors["backbone.norm_f.weight"] = testing::F32Tensor({64}, std::vector<float>(64, 1.0f));
  tensors["lm_head.weight"] = testing::F32Tensor({128, 64}, std::vector<float>(128 * 64));
  tensors["backbone.layers.0.norm.weight"] = testing::F32Tensor({64}, std::vector<float>(64, 1.0f));
  tensors["backbone.layers.0.mixer.in_proj.weight"] =
      testing::F32Tensor({328, 64}, std::vector<float>(328 * 64));
  tensors["backbone.layers.0.mixer.out_proj.weight"] =
      testing::F32Tensor({64, 128}, std::vector<float>(64 * 128));
  tensors["backbone.layers.0.mixer.conv1d.weight"] =
      testing::F32Tensor({192, 1, 4}, std::vector<float>(192 * 4));
  tensors["backbone.layers.0.mixer.conv1d.bias"] = testing::F32Tensor({192}, std::vector<float>(192));
  tensors["backbone.layers.0.mixer.A_log"] = testing::F32Tensor({7}, std::vector<float>(7));
  testing::WriteSafetensors(dir.path() + "/model.safetensors", tensors);
  m = HybridModel::Load(dir.path(), backend.get());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("backbone.layers.0.mixer.A_log"));
}

}  // namespace
}  // namespace treespec
