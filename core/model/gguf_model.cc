#include "core/model/gguf_model.h"

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/model/gguf_dequant.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status Unimplemented(const GgufFile& f, const std::string& key, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(f.path(), ": metadata '", key, "' ", what));
}

absl::Status Invalid(const GgufFile& f, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata '", key, "' ", what));
}

absl::StatusOr<int64_t> PositiveInt(const GgufFile& f, const std::string& key) {
  TS_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v <= 0) return Invalid(f, key, absl::StrCat("must be positive, got ", v));
  return v;
}

// llama.cpp writes an absent token id as uint32 0xFFFFFFFF (-1).
bool IsNullToken(int64_t id) { return id == -1 || id == 0xFFFFFFFFll; }

// One owned float/half buffer per dequantised tensor.
struct OwnedBuffer {
  std::vector<uint8_t> bytes;
};

}  // namespace

bool IsGgufPath(const std::string& path) {
  return path.size() > 5 && absl::EndsWithIgnoreCase(path, ".gguf");
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  TS_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch != "llama") {
    return Unimplemented(f, "general.architecture",
                         absl::StrCat("= \"", arch, "\" is not supported (only llama)"));
  }
  ModelConfig mc;
  mc.arch = Architecture::kLlama;
  mc.architecture_name = "LlamaForCausalLM";
  LlamaConfig& c = mc.llama;
  TS_ASSIGN_OR_RETURN(c.hidden_size, PositiveInt(f, "llama.embedding_length"));
  TS_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(f, "llama.block_count"));
  TS_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(f, "llama.attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.intermediate_size, PositiveInt(f, "llama.feed_forward_length"));
  if (f.Find("llama.attention.head_count_kv") != nullptr) {
    TS_ASSIGN_OR_RETURN(c.num_kv_heads, PositiveInt(f, "llama.attention.head_count_kv"));
  } else {
    c.num_kv_heads = c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return Invalid(f, "llama.attention.head_count_kv",
                   absl::StrCat("(", c.num_kv_heads, ") must divide llama.attention.head_count (",
                                c.num_heads, ")"));
  }
  TS_ASSIGN_OR_RETURN(c.head_dim,
                      f.GetIntOr("llama.attention.key_length", c.hidden_size / c.num_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return Invalid(f, "llama.attention.key_length",
                   absl::StrCat("head dim must be positive and even, got ", c.head_dim));
  }
  TS_ASSIGN_OR_RETURN(int64_t value_length, f.GetIntOr("llama.attention.value_length", c.head_dim));
  if (value_length != c.head_dim) {
    return Unimplemented(f, "llama.attention.value_length",
                         absl::StrCat("= ", value_length, " differs from the key length ",
                                      c.head_dim, "; not supported"));
  }
  TS_ASSIGN_OR_RETURN(int64_t n_rot, f.GetIntOr("llama.rope.dimension_count", c.head_dim));
  if (n_rot != c.head_dim) {
    return Unimplemented(f, "llama.rope.dimension_count",
                         absl::StrCat("= ", n_rot, " (partial rotary over head dim ", c.head_dim,
                                      ") is not supported"));
  }
  TS_ASSIGN_OR_RETURN(c.rms_norm_eps, f.GetFloatOr("llama.attention.layer_norm_rms_epsilon", -1));
  if (!(c.rms_norm_eps > 0)) {
    if (f.Find("llama.attention.layer_norm_rms_epsilon") == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(f.path(), ": metadata 'llama.attention.layer_norm_rms_epsilon' is missing"));
    }
    return Invalid(f, "llama.attention.layer_norm_rms_epsilon",
                   absl::StrCat("must be positive, got ", c.rms_norm_eps));
  }
  TS_ASSIGN_OR_RETURN(c.rope_theta, f.GetFloatOr("llama.rope.freq_base", 10000.0));
  if (!(c.rope_theta > 0)) {
    return Invalid(f, "llama.rope.freq_base", absl::StrCat("must be positive, got ", c.rope_theta));
  }
  TS_ASSIGN_OR_RETURN(c.max_position_embeddings, f.GetIntOr("llama.context_length", 2048));
  if (c.max_position_embeddings <= 0) {
    return Invalid(f, "llama.context_length",
                   absl::StrCat("must be positive, got ", c.max_position_embeddings));
  }
  // Rope scaling: llama.cpp writes llama.rope.scaling.type (none, linear, yarn)
  // and, for llama3-style scaling, a rope_freqs tensor. Only "none" runs here.
  if (f.Find("llama.rope.scaling.type") != nullptr) {
    TS_ASSIGN_OR_RETURN(std::string type, f.GetString("llama.rope.scaling.type"));
    if (type != "none") {
      return Unimplemented(f, "llama.rope.scaling.type",
                           absl::StrCat("= \"", type, "\" is not supported"));
    }
  }
  TS_ASSIGN_OR_RETURN(double factor, f.GetFloatOr("llama.rope.scaling.factor", 0.0));
  if (factor != 0.0 && factor != 1.0) {
    return Unimplemented(f, "llama.rope.scaling.factor",
                         absl::StrCat("= ", factor, " (rope scaling) is not supported"));
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": tensor 'rope_freqs.weight' (llama3 rope scaling factors) is not supported"));
  }
  TS_ASSIGN_OR_RETURN(int64_t experts, f.GetIntOr("llama.expert_count", 0));
  if (experts > 0) {
    return Unimplemented(f, "llama.expert_count",
                         absl::StrCat("= ", experts, " (mixture of experts) is not supported"));
  }
  // Vocabulary: llama.vocab_size, else the tokenizer's token list, else the
  // embedding's rows.
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::NotFoundError(absl::StrCat(f.path(), ": tensor 'token_embd.weight' is missing"));
  }
  if (f.Find("llama.vocab_size") != nullptr) {
    TS_ASSIGN_OR_RETURN(c.vocab_size, PositiveInt(f, "llama.vocab_size"));
  } else if (f.Find("tokenizer.ggml.tokens") != nullptr) {
    TS_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                        f.GetStringArray("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int64_t>(tokens->size());
  } else {
    c.vocab_size = embd->shape[0];
  }
  if (c.vocab_size <= 0) return Invalid(f, "tokenizer.ggml.tokens", "is empty");
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  if (f.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    TS_ASSIGN_OR_RETURN(int64_t bos, f.GetInt("tokenizer.ggml.bos_token_id"));
    if (!IsNullToken(bos)) mc.bos_token_id = bos;
  }
  if (f.Find("tokenizer.ggml.eos_token_id") != nullptr) {
    TS_ASSIGN_OR_RETURN(int64_t eos, f.GetInt("tokenizer.ggml.eos_token_id"));
    if (!IsNullToken(eos)) mc.eos_token_ids.push_back(eos);
  }
  if (f.Find("tokenizer.ggml.eot_token_id") != nullptr) {
    TS_ASSIGN_OR_RETURN(int64_t eot, f.GetInt("tokenizer.ggml.eot_token_id"));
    if (!IsNullToken(eot) && (mc.eos_token_ids.empty() || mc.eos_token_ids[0] != eot)) {
      mc.eos_token_ids.push_back(eot);
    }
  }
  return mc;
}

std::string GgufToHfName(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int layer = 0;
  if (parts.size() != 4 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) || layer < 0 ||
      parts[1] != absl::StrCat(layer) || parts[3] != "weight") {
    return "";
  }
  static const std::pair<const char*, const char*> kMap[] = {
      {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},   {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  for (const auto& [g, h] : kMap) {
    if (parts[2] == g) return absl::StrCat("model.layers.", layer, ".", h, ".weight");
  }
  return "";
}

void UnpermuteQK(float* data, int64_t num_heads, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  std::vector<float> tmp(head_dim * cols);
  for (int64_t h = 0; h < num_heads; ++h) {
    float* head = data + h * head_dim * cols;
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::memcpy(&tmp[(j * half + i) * cols], head + (2 * i + j) * cols, cols * sizeof(float));
      }
    }
    std::memcpy(head, tmp.data(), tmp.size() * sizeof(float));
  }
}

namespace {

// The DType a ggml tensor type maps to unchanged, if any.
bool PlainDType(GgmlType type, DType* out) {
  switch (type) {
    case GgmlType::kF32: *out = DType::kF32; return true;
    case GgmlType::kF16: *out = DType::kF16; return true;
    case GgmlType::kBF16: *out = DType::kBF16; return true;
    case GgmlType::kQ8_0: *out = DType::kQ8_0; return true;
    case GgmlType::kQ4_0: *out = DType::kQ4_0; return true;
    case GgmlType::kQ4_1: *out = DType::kQ4_1; return true;
    case GgmlType::kQ4_K: *out = DType::kQ4_K; return true;
    case GgmlType::kQ5_0: *out = DType::kQ5_0; return true;
    case GgmlType::kQ5_1: *out = DType::kQ5_1; return true;
    case GgmlType::kQ5_K: *out = DType::kQ5_K; return true;
    case GgmlType::kQ6_K: *out = DType::kQ6_K; return true;
    default: return false;
  }
}

// The tensor's bytes as stored (a matrix the backend keeps in its own type),
// Q/K rows un-permuted as whole rows of blocks.
TensorInfo KeepRaw(const std::shared_ptr<const GgufFile>& file, const GgufTensor& t, DType d,
                   int64_t permute_heads, int64_t head_dim) {
  TensorInfo info;
  info.dtype = d;
  if (permute_heads == 0) {
    info.data = t.data;
    info.nbytes = t.nbytes;
    info.mapping = file;
    return info;
  }
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.assign(t.data, t.data + t.nbytes);
  const size_t row = DTypeBytes(d, t.shape[1]);
  const int64_t half = head_dim / 2;
  std::vector<uint8_t> tmp(head_dim * row);
  for (int64_t h = 0; h < permute_heads; ++h) {
    uint8_t* head = reinterpret_cast<uint8_t*>(buf->bytes.data()) + h * head_dim * row;
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::memcpy(&tmp[(j * half + i) * row], head + (2 * i + j) * row, row);
      }
    }
    std::memcpy(head, tmp.data(), tmp.size());
  }
  info.data = reinterpret_cast<const uint8_t*>(buf->bytes.data());
  info.nbytes = buf->bytes.size();
  info.mapping = buf;
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> GgufCheckpoint(
    const std::shared_ptr<const GgufFile>& file, const LlamaConfig& config, DType dtype,
    const Backend* keep_for) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF weights can be loaded as F32, F16 or BF16, not ", DTypeName(dtype)));
  }
  std::map<std::string, TensorInfo> tensors;
  for (const GgufTensor& t : file->tensors()) {
    const std::string hf = GgufToHfName(t.name);
    if (hf.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor '", t.name,
                                                     "' is not a llama tensor treespec knows"));
    }
    int64_t permute_heads = 0;
    if (absl::EndsWith(t.name, ".attn_q.weight")) permute_heads = config.num_heads;
    if (absl::EndsWith(t.name, ".attn_k.weight")) permute_heads = config.num_kv_heads;
    if (permute_heads > 0 &&
        (t.shape.size() != 2 || t.shape[0] != permute_heads * config.head_dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file->path(), ": tensor '", t.name, "' has shape ", ShapeString(t.shape),
                       ", expected [", permute_heads * config.head_dim, ", *] (", permute_heads,
                       " heads of ", config.head_dim, ")"));
    }
    DType stored;
    if (keep_for != nullptr && t.shape.size() == 2 && PlainDType(t.type, &stored) &&
        keep_for->WeightDType(stored) == stored) {
      TensorInfo info = KeepRaw(file, t, stored, permute_heads, config.head_dim);
      info.name = hf;
      info.file = file->path();
      info.shape = t.shape;
      tensors.emplace(hf, std::move(info));
      continue;
    }
    TensorInfo info;
    info.name = hf;
    info.file = file->path();
    info.shape = t.shape;
    const bool plain = (t.type == GgmlType::kF32 && dtype == DType::kF32) ||
                       (t.type == GgmlType::kF16 && dtype == DType::kF16) ||
                       (t.type == GgmlType::kBF16 && dtype == DType::kBF16);
    if (plain && permute_heads == 0) {
      info.dtype = dtype;
      info.data = t.data;
      info.nbytes = t.nbytes;
      info.mapping = file;  // keeps the mapping (owned by the file) alive
    } else {
      std::vector<float> f32(t.numel);
      TS_RETURN_IF_ERROR(DequantizeGgml(t.type, t.data, t.numel, f32.data()));
      if (permute_heads > 0) {
        UnpermuteQK(f32.data(), permute_heads, config.head_dim, t.shape[1]);
      }
      auto buf = std::make_shared<OwnedBuffer>();
      if (dtype == DType::kF32) {
        buf->bytes.resize(t.numel * 4);
        std::memcpy(buf->bytes.data(), f32.data(), buf->bytes.size());
      } else {
        buf->bytes.resize(t.numel * 2);
        uint16_t* out = reinterpret_cast<uint16_t*>(buf->bytes.data());
        for (int64_t i = 0; i < t.numel; ++i) {
          out[i] = dtype == DType::kF16 ? FloatToHalf(f32[i]) : FloatToBF16(f32[i]);
        }
      }
      info.dtype = dtype;
      info.data = buf->bytes.data();
      info.nbytes = buf->bytes.size();
      info.mapping = buf;
    }
    tensors.emplace(hf, std::move(info));
  }
  return Checkpoint::FromTensors(file->path(), std::move(tensors));
}

absl::StatusOr<GgufModel> OpenGgufModel(const std::string& path, DType dtype,
                                        const Backend* keep_for) {
  GgufModel m;
  TS_ASSIGN_OR_RETURN(m.file, GgufFile::Open(path));
  TS_ASSIGN_OR_RETURN(m.config, GgufModelConfig(*m.file));
  TS_ASSIGN_OR_RETURN(m.checkpoint, GgufCheckpoint(m.file, m.config.llama, dtype, keep_for));
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadGgufLlamaModel(const std::string& path,
                                                               Backend* backend,
                                                               Communicator* comm) {
  const DType act = backend->activation_dtype();
  const DType dtype = (act == DType::kF16 || act == DType::kBF16) ? act : DType::kF32;
  TS_ASSIGN_OR_RETURN(GgufModel m, OpenGgufModel(path, dtype, backend));
  WeightLoader loader(m.checkpoint.get(), backend);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                      LlamaModel::Create(m.config.llama, &loader, comm));
  TS_RETURN_IF_ERROR(m.checkpoint->CheckAllUsed());
  return model;
}

}  // namespace treespec
