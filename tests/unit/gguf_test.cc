// GgufFile (core/util/gguf.h) on synthetic images: every value type, tensor
// directory and alignment; and every kind of malformed file, which must give a
// clear Status (never a crash), including every truncation and random byte
// corruption of a valid file. Also GGUF metadata → LlamaConfig, the tensor
// name map and the Q/K un-permutation (core/model/gguf_model.h), also of
// quantised matrices the CPU backend keeps as stored.
#include "core/util/gguf.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/model/gguf_dequant.h"
#include "core/model/gguf_model.h"
#include "core/model/llama.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/testing/gguf_builder.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using ::treespec::testing::GgufBuilder;

absl::StatusOr<std::shared_ptr<const GgufFile>> ParseImage(const std::string& image) {
  auto owned = std::make_shared<std::string>(image);
  return GgufFile::Parse(owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size(),
                         "test.gguf");
}

GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.Raw("u8", 0, std::string(1, '\x7f'))
      .Raw("i8", 1, std::string(1, '\xff'))
      .Raw("u16", 2, GgufBuilder::Pod<uint16_t>(65535))
      .Raw("i16", 3, GgufBuilder::Pod<int16_t>(-2))
      .U32Kv("u32", 4000000000u)
      .I32Kv("i32", -7)
      .F32Kv("f32", 1.5f)
      .BoolKv("flag", true)
      .StrKv("name", "héllo")
      .Raw("u64", 10, GgufBuilder::U64(1ull << 40))
      .Raw("i64", 11, GgufBuilder::Pod<int64_t>(-(1ll << 40)))
      .Raw("f64", 12, GgufBuilder::Pod<double>(0.25))
      .StrArrayKv("words", {"a", "", "ccc"})
      .F32ArrayKv("scores", {0.5f, -1.0f})
      .I32ArrayKv("types", {1, 2, 3})
      .F32Tensor("a", {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7})
      .F32Tensor("b", {3}, {8, 9, 10});
  return b;
}

TEST(GgufFileTest, ParsesEveryValueTypeAndTheTensorDirectory) {
  auto f = ParseImage(ValidBuilder().Build());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(*g.GetInt("u8"), 127);
  EXPECT_EQ(*g.GetInt("i8"), -1);
  EXPECT_EQ(*g.GetInt("u16"), 65535);
  EXPECT_EQ(*g.GetInt("i16"), -2);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*g.GetInt("i32"), -7);
  EXPECT_EQ(*g.GetInt("u64"), 1ll << 40);
  EXPECT_EQ(*g.GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*g.GetFloatOr("f32", 0), 1.5);
  EXPECT_EQ(*g.GetFloatOr("f64", 0), 0.25);
  EXPECT_EQ(*g.GetFloatOr("absent", 3.0), 3.0);
  EXPECT_TRUE(*g.GetBoolOr("flag", false));
  EXPECT_EQ(*g.GetString("name"), "héllo");
  EXPECT_EQ(**g.GetStringArray("words"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(**g.GetFloatArray("scores"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(**g.GetIntArray("types"), (std::vector<int64_t>{1, 2, 3}));
  // Type mismatches and absences name the key.
  absl::Status s = g.GetString("u32").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'u32' has type uint32"), std::string::npos) << s;
  EXPECT_EQ(g.GetInt("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(g.GetStringArray("scores").status().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensor* a = g.FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (Shape{2, 4}));
  EXPECT_EQ(a->numel, 8);
  EXPECT_EQ(a->nbytes, 32u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  float v[8];
  std::memcpy(v, a->data, 32);
  EXPECT_EQ(v[5], 5.0f);
  const GgufTensor* b = g.FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 32u);
  std::memcpy(v, b->data, 12);
  EXPECT_EQ(v[2], 10.0f);
}

TEST(GgufFileTest, HonoursGeneralAlignment) {
  GgufBuilder b(3, 64);
  b.U32Kv("general.alignment", 64).F32Tensor("a", {3}, {1, 2, 3}).F32Tensor("b", {1}, {4});
  auto f = ParseImage(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->FindTensor("b")->offset, 64u);
}

TEST(GgufFileTest, ReadsVersion2) {
  GgufBuilder b(2);
  b.U32Kv("k", 5).F32Tensor("a", {2}, {1, 2});
  auto f = ParseImage(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ(*(*f)->GetInt("k"), 5);
}

// Plain tensors already in the wanted dtype alias the file; others are
// converted (an F16 tensor asked for as F32, an F32 one as F16).
TEST(GgufCheckpointTest, AliasesOrConvertsPlainTensors) {
  std::string halves;
  for (float v : {0.5f, -2.0f, 3.0f, 1.0f}) halves += GgufBuilder::Pod<uint16_t>(FloatToHalf(v));
  GgufBuilder::Tensor norm;
  norm.name = "output_norm.weight";
  norm.dims = {4};
  norm.type = 1;  // F16
  norm.data = halves;
  GgufBuilder b;
  b.F32Tensor("token_embd.weight", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}).AddTensor(norm);
  auto f = ParseImage(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  LlamaConfig c;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  for (DType dt : {DType::kF32, DType::kF16}) {
    auto ckpt = GgufCheckpoint(*f, c, dt);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto n = (*ckpt)->Find("model.norm.weight", {4});
    ASSERT_TRUE(n.ok()) << n.status();
    auto e = (*ckpt)->Find("model.embed_tokens.weight", {2, 4});
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*n)->dtype, dt);
    EXPECT_EQ((*e)->dtype, dt);
    EXPECT_EQ((*n)->data == (*f)->FindTensor("output_norm.weight")->data, dt == DType::kF16);
    EXPECT_EQ((*e)->data == (*f)->FindTensor("token_embd.weight")->data, dt == DType::kF32);
    float got[8];
    ConvertToF32((*n)->data, dt, 4, got);
    EXPECT_EQ(std::vector<float>(got, got + 4), (std::vector<float>{0.5f, -2.0f, 3.0f, 1.0f}));
    ConvertToF32((*e)->data, dt, 8, got);
    EXPECT_EQ(got[7], 8.0f);
  }
  EXPECT_EQ(GgufCheckpoint(*f, c, DType::kI32).status().code(), absl::StatusCode::kInvalidArgument);
}

struct BadCase {
  const char* name;
  std::string image;
  absl::StatusCode code;
  const char* needle;  // must appear in the message
};

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases;
  const std::string valid = ValidBuilder().Build();
  std::string bad_magic = valid;
  bad_magic[0] = 'X';
  cases.push_back({"magic", bad_magic, absl::StatusCode::kInvalidArgument, "not a GGUF file"});
  cases.push_back(
      {"version1", GgufBuilder(1).Build(), absl::StatusCode::kInvalidArgument, "GGUF version 1"});
  cases.push_back({"empty", "", absl::StatusCode::kDataLoss, "magic"});
  std::string huge_kv =
      "GGUF" + GgufBuilder::U32(3) + GgufBuilder::U64(0) + GgufBuilder::U64(1ull << 60);
  cases.push_back({"kv_count", huge_kv, absl::StatusCode::kDataLoss, "kv_count"});
  std::string huge_tensors =
      "GGUF" + GgufBuilder::U32(3) + GgufBuilder::U64(1ull << 60) + GgufBuilder::U64(0);
  cases.push_back({"tensor_count", huge_tensors, absl::StatusCode::kDataLoss, "tensor_count"});
  cases.push_back({"string_len",
                   GgufBuilder().Raw("k", 8, GgufBuilder::U64(1ull << 62) + "abc").Build(),
                   absl::StatusCode::kDataLoss, "value of 'k' length"});
  cases.push_back(
      {"array_len",
       GgufBuilder().Raw("arr", 9, GgufBuilder::U32(4) + GgufBuilder::U64(1ull << 61)).Build(),
       absl::StatusCode::kDataLoss, "array 'arr'"});
  cases.push_back({"value_type", GgufBuilder().Raw("k", 13, "").Build(),
                   absl::StatusCode::kInvalidArgument, "type of 'k' 13"});
  cases.push_back({"nested", GgufBuilder().Raw("k", 9, GgufBuilder::U32(9)).Build(),
                   absl::StatusCode::kInvalidArgument, "nested"});
  cases.push_back({"bool", GgufBuilder().Raw("k", 7, std::string(1, '\x02')).Build(),
                   absl::StatusCode::kInvalidArgument, "bool byte is 2"});
  cases.push_back({"dup_key", GgufBuilder().U32Kv("k", 1).U32Kv("k", 2).Build(),
                   absl::StatusCode::kInvalidArgument, "duplicate metadata key 'k'"});
  cases.push_back({"alignment", GgufBuilder().U32Kv("general.alignment", 24).Build(),
                   absl::StatusCode::kInvalidArgument, "general.alignment"});
  cases.push_back({"alignment_type", GgufBuilder().StrKv("general.alignment", "32").Build(),
                   absl::StatusCode::kInvalidArgument, "general.alignment"});
  cases.push_back({"n_dims", GgufBuilder().F32Tensor("t", {1, 1, 1, 1, 1}, {1}).Build(),
                   absl::StatusCode::kInvalidArgument, "n_dims 5"});
  cases.push_back({"zero_dim", GgufBuilder().F32Tensor("t", {4, 0}, {}).Build(),
                   absl::StatusCode::kInvalidArgument, "dim 1 = 0"});
  cases.push_back({"overflow_dim",
                   GgufBuilder().F32Tensor("t", {1ull << 40, 1ull << 40}, {}).Build(),
                   absl::StatusCode::kInvalidArgument, "too large"});
  GgufBuilder::Tensor q2k;
  q2k.name = "q";
  q2k.dims = {256};
  q2k.type = 10;  // Q2_K
  q2k.data = std::string(84, '\0');
  cases.push_back({"ggml_type", GgufBuilder().AddTensor(q2k).Build(),
                   absl::StatusCode::kUnimplemented, "ggml type 10 (Q2_K)"});
  GgufBuilder::Tensor q4;
  q4.name = "q";
  q4.dims = {16};
  q4.type = 3;  // Q4_1, blocks of 32
  q4.data = std::string(20, '\0');
  cases.push_back({"partial_block", GgufBuilder().AddTensor(q4).Build(),
                   absl::StatusCode::kInvalidArgument, "row length 16"});
  GgufBuilder::Tensor misaligned;
  misaligned.name = "m";
  misaligned.dims = {1};
  misaligned.offset = 4;
  cases.push_back({"misaligned", GgufBuilder().AddTensor(misaligned).Build(),
                   absl::StatusCode::kInvalidArgument, "offset 4 is not a multiple"});
  GgufBuilder::Tensor past_end;
  past_end.name = "p";
  past_end.dims = {1000};
  past_end.offset = 0;
  cases.push_back({"past_end", GgufBuilder().AddTensor(past_end).Build(),
                   absl::StatusCode::kDataLoss, "'p' data"});
  GgufBuilder::Tensor overlap = past_end;
  overlap.name = "o";
  overlap.dims = {8};
  overlap.data = std::string(32, '\0');
  overlap.offset = -1;
  GgufBuilder::Tensor overlap2 = overlap;
  overlap2.name = "o2";
  overlap2.offset = 0;
  cases.push_back({"overlap", GgufBuilder().AddTensor(overlap).AddTensor(overlap2).Build(),
                   absl::StatusCode::kInvalidArgument, "overlap"});
  cases.push_back({"dup_tensor",
                   GgufBuilder().F32Tensor("t", {1}, {1}).F32Tensor("t", {1}, {2}).Build(),
                   absl::StatusCode::kInvalidArgument, "duplicate tensor name 't'"});
  return cases;
}

TEST(GgufFileTest, MalformedFilesGiveClearErrors) {
  for (const BadCase& c : BadCases()) {
    auto f = ParseImage(c.image);
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_EQ(f.status().code(), c.code) << c.name << ": " << f.status();
    EXPECT_NE(f.status().message().find(c.needle), std::string::npos)
        << c.name << ": " << f.status();
    EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos) << c.name;
  }
}

TEST(GgufFileTest, EveryTruncationIsDataLossOrInvalid) {
  const std::string valid = ValidBuilder().Build();
  ASSERT_TRUE(ParseImage(valid).ok());
  for (size_t n = 0; n < valid.size(); ++n) {
    auto f = ParseImage(valid.substr(0, n));
    ASSERT_FALSE(f.ok()) << "prefix " << n << " of " << valid.size() << " parsed";
    EXPECT_TRUE(f.status().code() == absl::StatusCode::kDataLoss ||
                f.status().code() == absl::StatusCode::kInvalidArgument)
        << "prefix " << n << ": " << f.status();
  }
}

TEST(GgufFileTest, RandomCorruptionNeverCrashes) {
  const std::string valid = ValidBuilder().Build();
  std::mt19937 rng(12);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string img = valid;
    const int flips = 1 + trial % 4;
    for (int k = 0; k < flips; ++k) {
      img[rng() % img.size()] = static_cast<char>(rng() & 0xff);
    }
    auto f = ParseImage(img);
    if (!f.ok()) {
      ++rejected;
      EXPECT_NE(f.status().code(), absl::StatusCode::kInternal) << f.status();
      continue;
    }
    // Whatever parses has every tensor inside the image.
    for (const GgufTensor& t : (*f)->tensors()) {
      const auto* base = reinterpret_cast<const uint8_t*>(
          static_cast<const std::string*>((*f)->owner().get())->data());
      EXPECT_GE(t.data, base);
      EXPECT_LE(t.data + t.nbytes, base + img.size()) << t.name;
    }
  }
  EXPECT_GT(rejected, 100);
}

// ---- metadata → config ----

GgufBuilder LlamaBuilder(int64_t heads = 4, int64_t kv_heads = 2) {
  GgufBuilder b;
  b.StrKv("general.architecture", "llama")
      .U32Kv("llama.embedding_length", 16)
      .U32Kv("llama.block_count", 2)
      .U32Kv("llama.attention.head_count", heads)
      .U32Kv("llama.attention.head_count_kv", kv_heads)
      .U32Kv("llama.feed_forward_length", 24)
      .F32Kv("llama.rope.freq_base", 500000.0f)
      .F32Kv("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .U32Kv("llama.context_length", 128)
      .StrArrayKv("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"})
      .U32Kv("tokenizer.ggml.bos_token_id", 1)
      .U32Kv("tokenizer.ggml.eos_token_id", 2)
      .F32Tensor("token_embd.weight", {16, 5}, std::vector<float>(80, 0.5f));
  return b;
}

TEST(GgufConfigTest, LlamaKeysBecomeTheConfig) {
  auto f = ParseImage(LlamaBuilder().Build());
  ASSERT_TRUE(f.ok()) << f.status();
  auto mc = GgufModelConfig(**f);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const LlamaConfig& c = mc->llama;
  EXPECT_EQ(mc->arch, Architecture::kLlama);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.intermediate_size, 24);
  EXPECT_EQ(c.vocab_size, 5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
  EXPECT_EQ(mc->bos_token_id, 1);
  EXPECT_EQ(mc->eos_token_ids, (std::vector<int64_t>{2}));
}

TEST(GgufConfigTest, RefusesWhatIsNotImplementedNamingTheKey) {
  struct Case {
    GgufBuilder b;
    absl::StatusCode code;
    const char* needle;
  };
  std::vector<Case> cases;
  {
    GgufBuilder b;
    b.StrKv("general.architecture", "gpt2");
    cases.push_back({b, absl::StatusCode::kUnimplemented, "'general.architecture' = \"gpt2\""});
  }
  cases.push_back({LlamaBuilder().StrKv("llama.rope.scaling.type", "yarn"),
                   absl::StatusCode::kUnimplemented, "'llama.rope.scaling.type' = \"yarn\""});
  cases.push_back({LlamaBuilder().F32Kv("llama.rope.scaling.factor", 4.0f),
                   absl::StatusCode::kUnimplemented, "llama.rope.scaling.factor"});
  cases.push_back({LlamaBuilder().U32Kv("llama.rope.dimension_count", 2),
                   absl::StatusCode::kUnimplemented, "llama.rope.dimension_count"});
  cases.push_back({LlamaBuilder().U32Kv("llama.expert_count", 8), absl::StatusCode::kUnimplemented,
                   "llama.expert_count"});
  cases.push_back({LlamaBuilder(4, 3), absl::StatusCode::kInvalidArgument,
                   "'llama.attention.head_count_kv' (3) must divide"});
  cases.push_back({LlamaBuilder().F32Tensor("rope_freqs.weight", {2}, {1, 1}),
                   absl::StatusCode::kUnimplemented, "rope_freqs.weight"});
  {
    GgufBuilder b;
    b.StrKv("general.architecture", "llama").U32Kv("llama.embedding_length", 16);
    cases.push_back({b, absl::StatusCode::kNotFound, "'llama.block_count' is missing"});
  }
  {
    GgufBuilder b;
    b.StrKv("general.architecture", "llama").StrKv("llama.embedding_length", "16");
    cases.push_back(
        {b, absl::StatusCode::kInvalidArgument, "'llama.embedding_length' has type string"});
  }
  for (Case& c : cases) {
    auto f = ParseImage(c.b.Build());
    ASSERT_TRUE(f.ok()) << f.status();
    auto mc = GgufModelConfig(**f);
    ASSERT_FALSE(mc.ok()) << c.needle;
    EXPECT_EQ(mc.status().code(), c.code) << mc.status();
    EXPECT_NE(mc.status().message().find(c.needle), std::string::npos) << mc.status();
  }
}

TEST(GgufConfigTest, TensorNamesMapToHuggingFace) {
  EXPECT_EQ(GgufToHfName("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(GgufToHfName("output.weight"), "lm_head.weight");
  EXPECT_EQ(GgufToHfName("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(GgufToHfName("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(GgufToHfName("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(GgufToHfName("blk.3.ffn_down.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(GgufToHfName("blk.03.ffn_down.weight"), "");
  EXPECT_EQ(GgufToHfName("blk.1.attn_q.bias"), "");
  EXPECT_EQ(GgufToHfName("rope_freqs.weight"), "");
}

// convert_hf_to_gguf.py's permute, written from its definition:
// w.reshape(n_head, 2, d/2, cols).swapaxes(1, 2).reshape(w.shape).
std::vector<float> Permute(const std::vector<float>& w, int64_t n_head, int64_t d, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t half = d / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        // out[h][i][j] = in[h][j][i]
        for (int64_t c = 0; c < cols; ++c) {
          out[((h * half + i) * 2 + j) * cols + c] = w[((h * 2 + j) * half + i) * cols + c];
        }
      }
    }
  }
  return out;
}

TEST(GgufConfigTest, UnpermuteInvertsTheConverterPermutation) {
  for (auto [heads, d, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{3, 8, 5}, {1, 2, 1}, {2, 64, 3}}) {
    std::vector<float> w(heads * d * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
    std::vector<float> p = Permute(w, heads, d, cols);
    if (d > 2) EXPECT_NE(p, w);
    UnpermuteQK(p.data(), heads, d, cols);
    EXPECT_EQ(p, w) << heads << " heads of " << d;
  }
}

TEST(GgufCheckpointTest, TensorsUnderHfNamesWithQkUnpermuted) {
  // 2 heads of 4 (hidden 8), 1 KV head; q rows 0..7 stored permuted.
  const int64_t D = 8;
  std::vector<float> q(D * D), k(4 * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 100.0f + i;
  GgufBuilder b;
  b.StrKv("general.architecture", "llama")
      .U32Kv("llama.embedding_length", D)
      .U32Kv("llama.block_count", 1)
      .U32Kv("llama.attention.head_count", 2)
      .U32Kv("llama.attention.head_count_kv", 1)
      .U32Kv("llama.feed_forward_length", 4)
      .F32Kv("llama.attention.layer_norm_rms_epsilon", 1e-6f)
      .F32Tensor("token_embd.weight", {D, 3}, std::vector<float>(3 * D, 1.0f))
      .F32Tensor("blk.0.attn_q.weight", {D, D}, Permute(q, 2, 4, D))
      .F32Tensor("blk.0.attn_k.weight", {D, 4}, Permute(k, 1, 4, D))
      .F32Tensor("blk.0.attn_v.weight", {D, 4}, k);
  auto f = ParseImage(b.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  auto mc = GgufModelConfig(**f);
  ASSERT_TRUE(mc.ok()) << mc.status();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto ckpt = GgufCheckpoint(*f, mc->llama, dt);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto qi = (*ckpt)->Find("model.layers.0.self_attn.q_proj.weight", {D, D});
    ASSERT_TRUE(qi.ok()) << qi.status();
    auto ki = (*ckpt)->Find("model.layers.0.self_attn.k_proj.weight", {4, D});
    ASSERT_TRUE(ki.ok()) << ki.status();
    std::vector<float> got_q(q.size()), got_k(k.size());
    ConvertToF32((*qi)->data, (*qi)->dtype, q.size(), got_q.data());
    ConvertToF32((*ki)->data, (*ki)->dtype, k.size(), got_k.data());
    EXPECT_EQ(got_q, q) << DTypeName(dt);  // small integers: exact in bf16
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_NEAR(got_k[i], k[i], dt == DType::kF32 ? 0 : 0.5) << i;
    }
    EXPECT_EQ((*qi)->dtype, dt);
  }
  // A tensor with an unknown name is refused by name.
  GgufBuilder bad = b;
  bad.F32Tensor("blk.0.attn_q.bias", {D}, std::vector<float>(D));
  auto fb = ParseImage(bad.Build());
  ASSERT_TRUE(fb.ok()) << fb.status();
  auto cb = GgufCheckpoint(*fb, mc->llama);
  ASSERT_FALSE(cb.ok());
  EXPECT_NE(cb.status().message().find("'blk.0.attn_q.bias'"), std::string::npos) << cb.status();
}

// Random blocks of `type` for `rows` x `K` weights, with finite f16 scales
// (high byte `scale_hi`: 0x1c is about 0.004, 0x10 about 0.0005).
std::string RandomBlocks(DType type, int64_t rows, int64_t K, std::mt19937* rng,
                         char scale_hi = 0x1c) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string data(DTypeBytes(type, rows * K), '\0');
  for (char& ch : data) ch = static_cast<char>(byte(*rng));
  std::vector<int> halves;  // byte offsets of a block's f16 scales
  switch (type) {
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
      halves = {0, 2};
      break;
    case DType::kQ6_K:
      halves = {208};
      break;
    default:
      halves = {0};
  }
  const size_t block = DTypeBytes(type, DTypeBlockSize(type));
  for (size_t o = 0; o < data.size(); o += block) {
    for (int h : halves) data[o + h + 1] = scale_hi;
  }
  return data;
}

// A GGUF tensor `name` of `rows` x `K` RandomBlocks of `type` (ggml type `ggml`).
GgufBuilder::Tensor QuantTensor(const std::string& name, uint32_t ggml, DType type, int64_t rows,
                                int64_t K, std::mt19937* rng, char scale_hi = 0x1c) {
  GgufBuilder::Tensor t;
  t.name = name;
  t.dims = {static_cast<uint64_t>(K), static_cast<uint64_t>(rows)};
  t.type = ggml;
  t.data = RandomBlocks(type, rows, K, rng, scale_hi);
  return t;
}

// A GGUF image's checkpoint as a "cpu:1:auto" backend keeps it (quantised
// matrices as stored) and dequantised to f32.
struct BothLoads {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Checkpoint> kept, dequantised;
};
void LoadBothWays(const std::string& image, const LlamaConfig& config, BothLoads* out) {
  auto f = ParseImage(image);
  ASSERT_TRUE(f.ok()) << f.status();
  auto be = CreateBackend("cpu:1:auto");
  ASSERT_TRUE(be.ok()) << be.status();
  out->be = std::move(*be);
  auto kept = GgufCheckpoint(*f, config, DType::kF32, out->be.get());
  ASSERT_TRUE(kept.ok()) << kept.status();
  out->kept = std::move(*kept);
  auto dequantised = GgufCheckpoint(*f, config, DType::kF32);
  ASSERT_TRUE(dequantised.ok()) << dequantised.status();
  out->dequantised = std::move(*dequantised);
}

// Q4_K, Q5_K, Q6_K (and Q4_1, Q5_0) matrices stay quantised for a CPU backend that keeps them
// ("cpu:1:auto"): the checkpoint holds the file's blocks, the Q rows
// un-permuted as whole rows, and decodes to exactly what the dequantising
// load gives.
TEST(GgufCheckpointTest, QuantisedMatricesKeptWithQkUnpermuted) {
  const int64_t D = 8, K = 256;  // q: 2 heads of 4 rows, each row one Q4_K / Q6_K block
  std::mt19937 rng(9);
  struct Case {
    uint32_t ggml;
    DType kept;
  };
  for (const Case& c : {Case{12, DType::kQ4_K}, Case{3, DType::kQ4_1}, Case{6, DType::kQ5_0},
                        Case{14, DType::kQ6_K}, Case{13, DType::kQ5_K}}) {
    SCOPED_TRACE(DTypeName(c.kept));
    GgufBuilder::Tensor qt = QuantTensor("blk.0.attn_q.weight", c.ggml, c.kept, D, K, &rng);
    const std::string& q = qt.data;
    GgufBuilder b;
    b.AddTensor(qt);
    LlamaConfig config;
    config.num_heads = 2;
    config.num_kv_heads = 1;
    config.head_dim = 4;
    BothLoads loads;
    ASSERT_NO_FATAL_FAILURE(LoadBothWays(b.Build(), config, &loads));
    auto ki = loads.kept->Find("model.layers.0.self_attn.q_proj.weight", {D, K});
    ASSERT_TRUE(ki.ok()) << ki.status();
    auto di = loads.dequantised->Find("model.layers.0.self_attn.q_proj.weight", {D, K});
    ASSERT_TRUE(di.ok()) << di.status();
    EXPECT_EQ((*ki)->dtype, c.kept);
    EXPECT_EQ((*ki)->nbytes, q.size());
    ASSERT_EQ((*di)->dtype, DType::kF32);
    std::vector<float> row(K);
    for (int64_t r = 0; r < D; ++r) {
      cpu::DecodeRow(c.kept, (*ki)->data, r, K, row.data());
      EXPECT_EQ(0, std::memcmp(row.data(), reinterpret_cast<const float*>((*di)->data) + r * K,
                               K * sizeof(float)))
          << "row " << r;
    }
    // Row 1 of head 0 was stored as row 2 (the converter's permutation).
    std::vector<float> stored(D * K);
    ASSERT_TRUE(DequantizeGgml(static_cast<GgmlType>(c.ggml),
                               reinterpret_cast<const uint8_t*>(q.data()), D * K, stored.data())
                    .ok());
    cpu::DecodeRow(c.kept, (*ki)->data, 1, K, row.data());
    EXPECT_EQ(0, std::memcmp(row.data(), stored.data() + 2 * K, K * sizeof(float)));
  }
}

// A fused matrix (q, k, v as one) from parts of different kept types: llama.cpp's
// K-quant mixes of models whose width is not whole 256-element blocks store q and k
// as Q5_0 and v as Q8_0 (Q4_K_M), or q, k as Q5_1 (Q5_K_M). Q4_0 / Q5_0 / Q8_0 parts
// fuse as Q8_0, converted exactly; any other mix falls back to f32. Either way every
// row decodes to what the dequantising load gives.
TEST(GgufCheckpointTest, MixedTypePartsFuseWithoutLoss) {
  const int64_t K = 64;
  std::mt19937 rng(21);
  struct Part {
    const char* name;
    uint32_t ggml;
    DType type;
    int64_t rows;
  };
  struct Case {
    std::vector<Part> parts;
    DType fused;
  };
  const std::vector<Case> cases = {
      {{{"q", 6, DType::kQ5_0, 4}, {"k", 2, DType::kQ4_0, 2}, {"v", 8, DType::kQ8_0, 2}},
       DType::kQ8_0},
      {{{"q", 7, DType::kQ5_1, 4}, {"k", 7, DType::kQ5_1, 2}, {"v", 8, DType::kQ8_0, 2}},
       DType::kF32},
      {{{"q", 6, DType::kQ5_0, 4}, {"k", 6, DType::kQ5_0, 2}, {"v", 6, DType::kQ5_0, 2}},
       DType::kQ5_0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.parts[0].type)) + "+" + DTypeName(c.parts[2].type));
    GgufBuilder b;
    for (const Part& p : c.parts) {
      const char* ffn = p.name[0] == 'q' ? "gate" : p.name[0] == 'k' ? "up" : "down";
      b.AddTensor(QuantTensor(std::string("blk.0.ffn_") + ffn + ".weight", p.ggml, p.type,
                              p.rows, K, &rng));
    }
    BothLoads loads;
    ASSERT_NO_FATAL_FAILURE(LoadBothWays(b.Build(), LlamaConfig(), &loads));
    const char* hf[] = {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                        "model.layers.0.mlp.down_proj.weight"};
    std::vector<RowPart> parts;
    int64_t rows = 0;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      parts.push_back({hf[i], {c.parts[i].rows, K}, 0, c.parts[i].rows});
      rows += c.parts[i].rows;
    }
    WeightLoader loader(loads.kept.get(), loads.be.get());
    auto fused = loader.LoadRows(parts);
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(fused->dtype(), c.fused);
    EXPECT_EQ(fused->dim(0), rows);
    std::vector<float> got(K);
    int64_t r = 0;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      auto di = loads.dequantised->Find(hf[i], {c.parts[i].rows, K});
      ASSERT_TRUE(di.ok()) << di.status();
      for (int64_t j = 0; j < c.parts[i].rows; ++j, ++r) {
        cpu::DecodeRow(fused->dtype(), fused->raw(), r, K, got.data());
        EXPECT_EQ(0, std::memcmp(got.data(), reinterpret_cast<const float*>((*di)->data) + j * K,
                                 K * sizeof(float)))
            << "row " << r;
      }
    }
  }
}

// Backend::LinearRowBlocks on the CPU: the product of each block in its own
// dtype, written to the block's columns, for several rows (a product per
// block) and for one (one pass whose two threads' column ranges, at 128,
// 256 and 384 here, cut across blocks); the result does not depend on how
// many rows come at once. Blocks whose widths or K do not fit are refused.
TEST(CpuRowBlocksTest, EachBlocksProductInItsColumns) {
  auto be = CreateBackend("cpu:2:auto");
  ASSERT_TRUE(be.ok()) << be.status();
  const int64_t K = 256;
  std::mt19937 rng(5);
  const std::vector<std::pair<DType, int64_t>> parts = {
      {DType::kQ4_K, 208}, {DType::kQ6_K, 144}, {DType::kQ8_0, 112}, {DType::kF32, 48}};
  RowBlocks blocks;
  std::vector<std::vector<float>> dense;  // each block decoded to f32
  int64_t N = 0;
  for (auto [type, rows] : parts) {
    std::string bytes;
    if (type == DType::kF32) {
      std::vector<float> v(rows * K);
      std::uniform_real_distribution<float> u(-0.5f, 0.5f);
      for (float& x : v) x = u(rng);
      bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    } else {
      bytes = RandomBlocks(type, rows, K, &rng);
    }
    auto t = (*be)->Alloc(type, {rows, K});
    ASSERT_TRUE(t.ok()) << t.status();
    std::memcpy(t->raw(), bytes.data(), bytes.size());
    std::vector<float> d(rows * K);
    for (int64_t r = 0; r < rows; ++r) cpu::DecodeRow(type, t->raw(), r, K, d.data() + r * K);
    dense.push_back(std::move(d));
    blocks.push_back(*t);
    N += rows;
  }
  const int64_t T = 5;
  std::vector<float> xv(T * K);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : xv) v = u(rng);
  auto x = (*be)->Alloc(DType::kF32, {T, K});
  ASSERT_TRUE(x.ok());
  std::memcpy(x->raw(), xv.data(), xv.size() * sizeof(float));
  auto out = (*be)->Alloc(DType::kF32, {T, N});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE((*be)->LinearRowBlocks(*x, blocks, &*out).ok());
  // Against each block alone (Linear) and against the f64 product of its
  // decoded weights (the integer paths round x to int16 per 32 elements).
  int64_t at = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const int64_t n = blocks[b].dim(0);
    auto alone = (*be)->Alloc(DType::kF32, {T, n});
    ASSERT_TRUE(alone.ok());
    ASSERT_TRUE((*be)->Linear(*x, blocks[b], &*alone).ok());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = out->data<float>()[t * N + at + j];
        ASSERT_EQ(got, alone->data<float>()[t * n + j]) << "block " << b << " row " << t;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += static_cast<double>(xv[t * K + k]) * dense[b][j * K + k];
          mag += std::abs(static_cast<double>(xv[t * K + k]) * dense[b][j * K + k]);
        }
        EXPECT_NEAR(got, ref, 1e-3 * mag + 1e-5) << "block " << b << " row " << t << " col " << j;
      }
    }
    at += n;
  }
  // One row at a time writes the same values in place.
  for (int64_t t = 0; t < T; ++t) {
    auto x1 = (*be)->Alloc(DType::kF32, {1, K});
    auto o1 = (*be)->Alloc(DType::kF32, {1, N});
    ASSERT_TRUE(x1.ok() && o1.ok());
    std::memcpy(x1->raw(), xv.data() + t * K, K * sizeof(float));
    ASSERT_TRUE((*be)->LinearRowBlocks(*x1, blocks, &*o1).ok());
    EXPECT_EQ(0, std::memcmp(o1->raw(), out->data<float>() + t * N, N * sizeof(float)))
        << "row " << t;
  }
  // Shapes that do not fit are refused, naming them.
  auto narrow = (*be)->Alloc(DType::kF32, {T, N - 8});
  ASSERT_TRUE(narrow.ok());
  absl::Status s = (*be)->LinearRowBlocks(*x, blocks, &*narrow);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("row blocks of " + std::to_string(N) + " rows"), std::string::npos)
      << s;
  RowBlocks wrong_k = blocks;
  auto other = (*be)->Alloc(DType::kF32, {8, 128});
  ASSERT_TRUE(other.ok());
  wrong_k.back() = *other;
  s = (*be)->LinearRowBlocks(*x, wrong_k, &*out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("weight block"), std::string::npos) << s;
}

// WeightLoader::LoadRowBlocks on a CPU backend that keeps GGUF types: parts
// that share a type, or that join exactly as Q8_0, are one fused tensor;
// other mixes (Q5_K_M's q, k as Q5_1 and v as Q8_0; a 7B Q4_K_M's q, k as
// Q4_K and v as Q6_K) stay one block per part, each as stored, rather than
// one f32 matrix. Every row decodes to what the dequantising load gives.
// Row slices (tensor parallelism) are cut from each part.
TEST(GgufCheckpointTest, MixedTypePartsStayAsRowBlocks) {
  const int64_t K = 256;
  std::mt19937 rng(22);
  struct Part {
    uint32_t ggml;
    DType type;
    int64_t rows;
  };
  struct Case {
    std::vector<Part> parts;
    std::vector<DType> blocks;
  };
  const std::vector<Case> cases = {
      {{{6, DType::kQ5_0, 8}, {2, DType::kQ4_0, 4}, {8, DType::kQ8_0, 4}}, {DType::kQ8_0}},
      {{{7, DType::kQ5_1, 8}, {7, DType::kQ5_1, 4}, {8, DType::kQ8_0, 4}},
       {DType::kQ5_1, DType::kQ5_1, DType::kQ8_0}},
      {{{12, DType::kQ4_K, 8}, {12, DType::kQ4_K, 4}, {14, DType::kQ6_K, 4}},
       {DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}},
      {{{12, DType::kQ4_K, 8}, {12, DType::kQ4_K, 4}, {12, DType::kQ4_K, 4}}, {DType::kQ4_K}}};
  const char* gguf[] = {"gate", "up", "down"};
  const char* hf[] = {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                      "model.layers.0.mlp.down_proj.weight"};
  // gate, up and down tensors as the parts say.
  auto image = [&](const std::vector<Part>& parts) {
    GgufBuilder b;
    for (size_t i = 0; i < parts.size(); ++i) {
      b.AddTensor(QuantTensor(std::string("blk.0.ffn_") + gguf[i] + ".weight", parts[i].ggml,
                              parts[i].type, parts[i].rows, K, &rng));
    }
    return b.Build();
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.parts[0].type)) + "+" + DTypeName(c.parts[2].type));
    BothLoads loads;
    ASSERT_NO_FATAL_FAILURE(LoadBothWays(image(c.parts), LlamaConfig(), &loads));
    WeightLoader loader(loads.kept.get(), loads.be.get());
    // Whole parts, then the second half of each part's rows.
    for (int half = 0; half < 2; ++half) {
      SCOPED_TRACE(half ? "second half of the rows" : "whole parts");
      std::vector<RowPart> parts;
      for (size_t i = 0; i < c.parts.size(); ++i) {
        const int64_t rows = c.parts[i].rows;
        parts.push_back({hf[i], {rows, K}, half ? rows / 2 : 0, rows});
      }
      auto blocks = loader.LoadRowBlocks(parts);
      ASSERT_TRUE(blocks.ok()) << blocks.status();
      ASSERT_EQ(blocks->size(), c.blocks.size());
      for (size_t i = 0; i < c.blocks.size(); ++i) EXPECT_EQ((*blocks)[i].dtype(), c.blocks[i]);
      // Walk the fused rows: (block, row in block) against (part, row in part).
      size_t blk = 0;
      int64_t in_blk = 0;
      std::vector<float> got(K);
      for (size_t i = 0; i < parts.size(); ++i) {
        auto di = loads.dequantised->Find(hf[i], parts[i].shape);
        ASSERT_TRUE(di.ok()) << di.status();
        for (int64_t r = parts[i].r0; r < parts[i].r1; ++r) {
          if (in_blk == (*blocks)[blk].dim(0)) ++blk, in_blk = 0;
          ASSERT_LT(blk, blocks->size());
          cpu::DecodeRow((*blocks)[blk].dtype(), (*blocks)[blk].raw(), in_blk++, K, got.data());
          EXPECT_EQ(0, std::memcmp(got.data(),
                                   reinterpret_cast<const float*>((*di)->data) + r * K,
                                   K * sizeof(float)))
              << "part " << i << " row " << r;
        }
      }
      EXPECT_EQ(blk + 1, blocks->size());
    }
  }
  // A backend that computes in f32 fuses every mix as one f32 matrix.
  auto f = ParseImage(image(cases[2].parts));
  ASSERT_TRUE(f.ok()) << f.status();
  auto f32_be = CreateBackend("cpu:1");
  ASSERT_TRUE(f32_be.ok()) << f32_be.status();
  auto ckpt = GgufCheckpoint(*f, LlamaConfig(), DType::kF32);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  WeightLoader loader(ckpt->get(), f32_be->get());
  auto blocks = loader.LoadRowBlocks(
      {{hf[0], {8, K}, 0, 8}, {hf[1], {4, K}, 0, 4}, {hf[2], {4, K}, 0, 4}});
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  ASSERT_EQ(blocks->size(), 1u);
  EXPECT_EQ((*blocks)[0].dtype(), DType::kF32);
  EXPECT_EQ((*blocks)[0].dim(0), 16);
}

// A Llama GGUF laid out as llama.cpp's Q4_K_M lays out a 7B model: q and k
// as Q4_K, v as Q6_K in some layers and Q4_K in others. On "cpu:2:auto" its
// q/k/v stay quantised as row blocks (before, such a layer's q/k/v became one
// f32 matrix); its logits agree with the dequantised model's ("cpu:2", f32
// weights) within the integer path's rounding of the activations, and its
// prompt's last logits equal a one-token step's after the same prefix.
TEST(GgufLlamaTest, KQuantMixWithQ6KValuesMatchesTheDequantisedModel) {
  const int64_t D = 256, H = 4, Hkv = 2, Dh = 64, F = 64, V = 16, L = 2;
  std::mt19937 rng(31);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto f32 = [&](int64_t count, float scale) {
    std::vector<float> v(count);
    for (float& x : v) x = scale * n01(rng);
    return v;
  };
  auto quantised = [&](const std::string& name, uint32_t ggml, DType type, int64_t rows) {
    return QuantTensor(name, ggml, type, rows, D, &rng, /*scale_hi=*/0x10);
  };
  GgufBuilder b;
  b.StrKv("general.architecture", "llama")
      .U32Kv("llama.embedding_length", D)
      .U32Kv("llama.block_count", L)
      .U32Kv("llama.attention.head_count", H)
      .U32Kv("llama.attention.head_count_kv", Hkv)
      .U32Kv("llama.feed_forward_length", F)
      .F32Kv("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .U32Kv("llama.context_length", 64)
      .StrArrayKv("tokenizer.ggml.tokens", std::vector<std::string>(V, "t"))
      .F32Tensor("token_embd.weight", {D, V}, f32(V * D, 1.0f))
      .F32Tensor("output_norm.weight", {D}, std::vector<float>(D, 1.0f))
      .F32Tensor("output.weight", {D, V}, f32(V * D, 0.05f));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.F32Tensor(p + "attn_norm.weight", {D}, std::vector<float>(D, 1.0f))
        .F32Tensor(p + "ffn_norm.weight", {D}, std::vector<float>(D, 1.0f))
        .F32Tensor(p + "attn_output.weight", {H * Dh, D}, f32(D * H * Dh, 0.03f))
        .F32Tensor(p + "ffn_down.weight", {F, D}, f32(D * F, 0.05f));
    b.AddTensor(quantised(p + "attn_q.weight", 12, DType::kQ4_K, H * Dh));
    b.AddTensor(quantised(p + "attn_k.weight", 12, DType::kQ4_K, Hkv * Dh));
    b.AddTensor(l == 0 ? quantised(p + "attn_v.weight", 14, DType::kQ6_K, Hkv * Dh)
                       : quantised(p + "attn_v.weight", 12, DType::kQ4_K, Hkv * Dh));
    b.AddTensor(quantised(p + "ffn_gate.weight", 12, DType::kQ4_K, F));
    b.AddTensor(quantised(p + "ffn_up.weight", 12, DType::kQ4_K, F));
  }
  testing::TempDir dir;
  const std::string path = dir.path() + "/mix.gguf";
  testing::WriteFile(path, b.Build());

  auto run = [&](const std::string& spec, std::vector<float>* prompt_logits,
                 std::vector<float>* step_logits, int64_t* weight_bytes) {
    auto be = CreateBackend(spec);
    ASSERT_TRUE(be.ok()) << be.status();
    const int64_t before = (*be)->memory_stats().in_use_bytes;
    auto model = LlamaModel::Load(path, be->get());
    ASSERT_TRUE(model.ok()) << model.status();
    *weight_bytes = (*be)->memory_stats().in_use_bytes - before;
    auto cache = PagedKvCache::Create((*model)->KvOptions(8, 16), be->get());
    ASSERT_TRUE(cache.ok()) << cache.status();
    const std::vector<int32_t> prompt = {1, 5, 9, 3, 14, 7, 2, 11};
    // The whole prompt in one pass (all logits), and the same prompt as a
    // prefix plus a one-token step on a second sequence.
    const int64_t a = (*cache)->CreateSequence(), c = (*cache)->CreateSequence();
    ASSERT_TRUE((*cache)->Reserve(a, prompt.size()).ok());
    ASSERT_TRUE((*cache)->Reserve(c, prompt.size()).ok());
    ForwardOutput out;
    ForwardSeq all;
    all.kv_seq = a;
    all.tokens = prompt;
    all.logits = LogitsMode::kAll;
    ASSERT_TRUE((*model)->Forward({all}, cache->get(), &out).ok());
    *prompt_logits = out.logits;
    ForwardSeq prefix;
    prefix.kv_seq = c;
    prefix.tokens.assign(prompt.begin(), prompt.end() - 1);
    prefix.logits = LogitsMode::kLast;
    ASSERT_TRUE((*model)->Forward({prefix}, cache->get(), &out).ok());
    ASSERT_TRUE((*cache)->Commit(c, prompt.size() - 1).ok());
    ForwardSeq step;
    step.kv_seq = c;
    step.tokens = {prompt.back()};
    step.logits = LogitsMode::kLast;
    ASSERT_TRUE((*model)->Forward({step}, cache->get(), &out).ok());
    step_logits->assign(out.row_logits(0), out.row_logits(0) + V);
  };
  std::vector<float> kept, kept_step, ref, ref_step;
  int64_t kept_bytes = 0, ref_bytes = 0;
  ASSERT_NO_FATAL_FAILURE(run("cpu:2:auto", &kept, &kept_step, &kept_bytes));
  ASSERT_NO_FATAL_FAILURE(run("cpu:2", &ref, &ref_step, &ref_bytes));
  ASSERT_EQ(kept.size(), ref.size());
  float scale = 0;
  for (float v : ref) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0.1f);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_NEAR(kept[i], ref[i], 5e-3f * scale) << "position " << i / V << " token " << i % V;
  }
  // Batch invariance: the prompt pass's last row is the one-token step's.
  EXPECT_EQ(0, std::memcmp(kept.data() + kept.size() - V, kept_step.data(), V * sizeof(float)));
  // One layer's q/k/v as f32 would be 512 x 256 x 4 bytes; kept as row
  // blocks they alias the file (whole parts) and the model allocates less.
  EXPECT_LT(kept_bytes, (H + 2 * Hkv) * Dh * D * 4) << "reference model: " << ref_bytes;
}

}  // namespace
}  // namespace treespec
