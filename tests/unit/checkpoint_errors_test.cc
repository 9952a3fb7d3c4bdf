// Broken checkpoints written to a temp dir, byte by byte: every defect gives a
// Status with the right code whose message names the file and the tensor or
// field, and nothing crashes. (Loading f16 / bf16 / sharded checkpoints that
// are fine is covered by tests/golden/llama_golden_test.cc.)
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/mamba.h"
#include "core/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;
using ::treespec::testing::F32Tensor;
using ::treespec::testing::ReadFile;
using ::treespec::testing::TempDir;
using ::treespec::testing::TestTensor;
using ::treespec::testing::WriteFile;
using ::treespec::testing::WriteSafetensors;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// vocab 16, hidden 8, ffn 12, 1 layer, 2 heads of 4, 1 kv head, untied.
nlohmann::json LlamaConfigJson() {
  return {{"architectures", nlohmann::json::array({"LlamaForCausalLM"})},
          {"vocab_size", 16},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", false}};
}

TestTensor Filled(Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i % 17);
  return F32Tensor(std::move(shape), v);
}

std::map<std::string, TestTensor> LlamaTensors() {
  std::map<std::string, TestTensor> t;
  t["model.embed_tokens.weight"] = Filled({16, 8});
  t["lm_head.weight"] = Filled({16, 8});
  t["model.norm.weight"] = Filled({8});
  const std::string p = "model.layers.0.";
  t[p + "input_layernorm.weight"] = Filled({8});
  t[p + "post_attention_layernorm.weight"] = Filled({8});
  t[p + "self_attn.q_proj.weight"] = Filled({8, 8});
  t[p + "self_attn.k_proj.weight"] = Filled({4, 8});
  t[p + "self_attn.v_proj.weight"] = Filled({4, 8});
  t[p + "self_attn.o_proj.weight"] = Filled({8, 8});
  t[p + "mlp.gate_proj.weight"] = Filled({12, 8});
  t[p + "mlp.up_proj.weight"] = Filled({12, 8});
  t[p + "mlp.down_proj.weight"] = Filled({8, 12});
  return t;
}

// Writes a safetensors file whose JSON header is `header` verbatim (padded to
// a multiple of 8), followed by `data`.
void WriteRawSafetensors(const std::string& path, std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  WriteFile(path, bytes + header + data);
}

class CheckpointErrorsTest : public ::testing::Test {
 protected:
  std::string Dir() const { return dir_.path(); }
  std::string File() const { return dir_.path() + "/model.safetensors"; }
  void WriteConfig(const nlohmann::json& config) {
    WriteFile(Dir() + "/config.json", config.dump(1));
  }
  // A valid tiny Llama, then `tensors` replaces the checkpoint.
  void WriteModel(const std::map<std::string, TestTensor>& tensors) {
    WriteConfig(LlamaConfigJson());
    WriteSafetensors(File(), tensors);
  }
  absl::Status LoadLlama() {
    backend_ = CreateCpuBackend();
    return LlamaModel::Load(Dir(), backend_.get()).status();
  }
  absl::Status OpenFile() { return SafetensorsFile::Open(File()).status(); }

  TempDir dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(CheckpointErrorsTest, ValidModelLoads) {
  WriteModel(LlamaTensors());
  EXPECT_TRUE(LoadLlama().ok()) << LoadLlama();
}

TEST_F(CheckpointErrorsTest, MissingTensor) {
  auto t = LlamaTensors();
  t.erase("model.layers.0.mlp.up_proj.weight");
  WriteModel(t);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir()));
  EXPECT_THAT(Msg(s), HasSubstr("model.layers.0.mlp.up_proj.weight"));
}

TEST_F(CheckpointErrorsTest, ExtraTensorIsRejectedByCheckAllUsed) {
  auto t = LlamaTensors();
  t["model.layers.0.self_attn.q_norm.weight"] = Filled({4});
  WriteModel(t);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("model.layers.0.self_attn.q_norm.weight"));
}

TEST_F(CheckpointErrorsTest, WrongShape) {
  auto t = LlamaTensors();
  t["model.layers.0.self_attn.k_proj.weight"] = Filled({8, 8});  // expects [4, 8]
  WriteModel(t);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_THAT(Msg(s), HasSubstr("expected"));
}

TEST_F(CheckpointErrorsTest, UnknownDtypes) {
  for (const std::string dtype : {"F8_E4M3", "Q4", "F64"}) {
    WriteRawSafetensors(File(),
                        R"({"w":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,2]}})",
                        std::string(2, '\0'));
    absl::Status s = OpenFile();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << dtype << ": " << s;
    EXPECT_THAT(Msg(s), HasSubstr(File()));
    EXPECT_THAT(Msg(s), HasSubstr("'w'"));
    EXPECT_THAT(Msg(s), HasSubstr(dtype));
  }
}

TEST_F(CheckpointErrorsTest, NonFloatWeightDtype) {
  WriteConfig(LlamaConfigJson());
  WriteRawSafetensors(
      File(),
      R"({"model.embed_tokens.weight":{"dtype":"I32","shape":[16,8],"data_offsets":[0,512]}})",
      std::string(512, '\0'));
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("model.embed_tokens.weight"));
}

TEST_F(CheckpointErrorsTest, TruncatedData) {
  WriteModel(LlamaTensors());
  std::string bytes = ReadFile(File());
  WriteFile(File(), bytes.substr(0, bytes.size() - 10));
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  // Tensors are laid out in name order; the last one loses its tail.
  EXPECT_THAT(Msg(s), HasSubstr("model.norm.weight"));
  EXPECT_THAT(Msg(s), HasSubstr("truncated"));
}

TEST_F(CheckpointErrorsTest, TruncatedHeader) {
  WriteModel(LlamaTensors());
  std::string bytes = ReadFile(File());
  WriteFile(File(), bytes.substr(0, 40));  // length field + 32 bytes of JSON
  absl::Status s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("truncated header"));
  WriteFile(File(), bytes.substr(0, 5));  // not even the length field
  s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
}

TEST_F(CheckpointErrorsTest, CorruptJsonHeader) {
  WriteModel(LlamaTensors());
  std::string bytes = ReadFile(File());
  bytes[8] = '[';  // the opening brace of the header
  bytes[20] = '\x01';
  WriteFile(File(), bytes);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("JSON header"));
}

TEST_F(CheckpointErrorsTest, OversizedHeaderLength) {
  WriteModel(LlamaTensors());
  std::string bytes = ReadFile(File());
  const uint64_t claimed = 200ull << 20;  // 200 MB, over the 100 MB limit
  std::memcpy(bytes.data(), &claimed, 8);
  WriteFile(File(), bytes);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr(std::to_string(claimed)));
}

TEST_F(CheckpointErrorsTest, DataOffsetsMismatchShape) {
  WriteRawSafetensors(File(), R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
                      std::string(16, '\0'));
  absl::Status s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("'w'"));
  EXPECT_THAT(Msg(s), HasSubstr("16"));
}

TEST_F(CheckpointErrorsTest, ReversedAndOutOfRangeOffsets) {
  WriteRawSafetensors(File(), R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
                      std::string(16, '\0'));
  absl::Status s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr("'w'"));
  WriteRawSafetensors(File(), R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[64,80]}})",
                      std::string(16, '\0'));
  s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("'w'"));
}

TEST_F(CheckpointErrorsTest, OverlappingOffsets) {
  WriteRawSafetensors(File(),
                      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                      std::string(24, '\0'));
  absl::Status s = OpenFile();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(File()));
  EXPECT_THAT(Msg(s), HasSubstr("'a'"));
  EXPECT_THAT(Msg(s), HasSubstr("'b'"));
  EXPECT_THAT(Msg(s), HasSubstr("overlap"));
}

TEST_F(CheckpointErrorsTest, NoCheckpointFiles) {
  WriteConfig(LlamaConfigJson());
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir()));
  EXPECT_THAT(Msg(s), HasSubstr("model.safetensors"));
}

// Splits LlamaTensors() over two shards with an index; `edit` may change the index.
class ShardedCheckpointErrorsTest : public CheckpointErrorsTest {
 protected:
  void WriteSharded(const std::function<void(nlohmann::json*)>& edit) {
    WriteConfig(LlamaConfigJson());
    std::map<std::string, TestTensor> one, two;
    nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                            {"weight_map", nlohmann::json::object()}};
    int i = 0;
    for (auto& [name, t] : LlamaTensors()) {
      const bool first = i++ % 2 == 0;
      (first ? one : two)[name] = t;
      index["weight_map"][name] = first ? kShard1 : kShard2;
    }
    WriteSafetensors(Dir() + "/" + kShard1, one);
    WriteSafetensors(Dir() + "/" + kShard2, two);
    edit(&index);
    WriteFile(Dir() + "/model.safetensors.index.json", index.dump(1));
  }
  static constexpr char kShard1[] = "model-00001-of-00002.safetensors";
  static constexpr char kShard2[] = "model-00002-of-00002.safetensors";
};

TEST_F(ShardedCheckpointErrorsTest, ValidShardsLoad) {
  WriteSharded([](nlohmann::json*) {});
  EXPECT_TRUE(LoadLlama().ok()) << LoadLlama();
}

TEST_F(ShardedCheckpointErrorsTest, IndexNamesAMissingShard) {
  WriteSharded([](nlohmann::json*) {});
  std::filesystem::remove(Dir() + "/" + kShard2);
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir() + "/model.safetensors.index.json"));
  EXPECT_THAT(Msg(s), HasSubstr(kShard2));
  EXPECT_THAT(Msg(s), HasSubstr("holding tensor 'model."));
}

TEST_F(ShardedCheckpointErrorsTest, IndexNamesAMissingTensor) {
  WriteSharded([](nlohmann::json* index) {
    (*index)["weight_map"]["model.layers.0.mlp.extra.weight"] = kShard2;
  });
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), HasSubstr(kShard2));
  EXPECT_THAT(Msg(s), HasSubstr("model.layers.0.mlp.extra.weight"));
}

TEST_F(ShardedCheckpointErrorsTest, ShardHoldsATensorTheIndexPutsElsewhere) {
  WriteSharded([](nlohmann::json* index) {
    (*index)["weight_map"]["model.norm.weight"] =
        (*index)["weight_map"]["model.norm.weight"] == kShard1 ? kShard2 : kShard1;
  });
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr("model.norm.weight"));
  EXPECT_THAT(Msg(s), HasSubstr(Dir()));
}

TEST_F(CheckpointErrorsTest, UnsupportedArchitecture) {
  auto c = LlamaConfigJson();
  c["architectures"] = nlohmann::json::array({"GPT2LMHeadModel"});
  WriteConfig(c);
  absl::Status s = LoadModelConfig(Dir()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir() + "/config.json"));
  EXPECT_THAT(Msg(s), HasSubstr("GPT2LMHeadModel"));
}

TEST_F(CheckpointErrorsTest, MissingRequiredField) {
  auto c = LlamaConfigJson();
  c.erase("hidden_size");
  WriteConfig(c);
  WriteSafetensors(File(), LlamaTensors());
  absl::Status s = LoadLlama();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir() + "/config.json"));
  EXPECT_THAT(Msg(s), HasSubstr("'hidden_size'"));
  EXPECT_THAT(Msg(s), HasSubstr("missing"));
}

TEST_F(CheckpointErrorsTest, MistypedField) {
  auto c = LlamaConfigJson();
  c["hidden_size"] = "big";
  WriteConfig(c);
  absl::Status s = LoadModelConfig(Dir()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir() + "/config.json"));
  EXPECT_THAT(Msg(s), HasSubstr("'hidden_size'"));
  EXPECT_THAT(Msg(s), HasSubstr("big"));
}

TEST_F(CheckpointErrorsTest, CorruptConfigJson) {
  WriteFile(Dir() + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], ");
  absl::Status s = LoadModelConfig(Dir()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir() + "/config.json"));
}

TEST_F(CheckpointErrorsTest, MambaMissingTensor) {
  WriteConfig({{"architectures", nlohmann::json::array({"MambaForCausalLM"})},
               {"vocab_size", 16},
               {"hidden_size", 8},
               {"num_hidden_layers", 1},
               {"state_size", 4},
               {"expand", 2},
               {"conv_kernel", 4}});
  std::map<std::string, TestTensor> t;
  t["backbone.embeddings.weight"] = Filled({16, 8});
  t["backbone.norm_f.weight"] = Filled({8});
  t["backbone.layers.0.norm.weight"] = Filled({8});
  t["backbone.layers.0.mixer.in_proj.weight"] = Filled({32, 8});
  t["backbone.layers.0.mixer.conv1d.weight"] = Filled({16, 1, 4});
  t["backbone.layers.0.mixer.conv1d.bias"] = Filled({16});
  WriteSafetensors(File(), t);
  backend_ = CreateCpuBackend();
  absl::Status s = MambaModel::Load(Dir(), backend_.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), HasSubstr(Dir()));
  EXPECT_THAT(Msg(s), HasSubstr("backbone.layers.0.mixer.x_proj.weight"));
}

}  // namespace
}  // namespace treespec
