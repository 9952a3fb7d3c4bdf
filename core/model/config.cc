#include "core/model/config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/model/gguf_model.h"
#include "core/util/gguf.h"
#include "core/util/json_fields.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status Positive(const JsonFields& f, const std::string& key, int64_t v) {
  if (v <= 0) return f.Error(key, absl::StrCat("must be positive, got ", v));
  return absl::OkStatus();
}

absl::StatusOr<LlamaConfig> ParseLlama(const JsonFields& f, const nlohmann::json& j) {
  LlamaConfig c;
  TS_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size"));
  TS_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.num_heads, f.Int("num_attention_heads"));
  for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_hidden_layers", c.num_layers},
                      {"num_attention_heads", c.num_heads}}) {
    TS_RETURN_IF_ERROR(Positive(f, k, v));
  }
  TS_ASSIGN_OR_RETURN(c.num_kv_heads, f.IntOr("num_key_value_heads", c.num_heads));
  TS_RETURN_IF_ERROR(Positive(f, "num_key_value_heads", c.num_kv_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return f.Error("num_key_value_heads",
                   absl::StrCat("(", c.num_kv_heads, ") must divide num_attention_heads (",
                                c.num_heads, ")"));
  }
  TS_ASSIGN_OR_RETURN(c.head_dim, f.IntOr("head_dim", c.hidden_size / c.num_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return f.Error("head_dim", absl::StrCat("must be positive and even, got ", c.head_dim));
  }
  TS_ASSIGN_OR_RETURN(c.rms_norm_eps, f.DoubleOr("rms_norm_eps", 1e-6));
  TS_ASSIGN_OR_RETURN(c.rope_theta, f.DoubleOr("rope_theta", 10000.0));
  TS_ASSIGN_OR_RETURN(c.max_position_embeddings, f.IntOr("max_position_embeddings", 2048));
  TS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", false));
  TS_ASSIGN_OR_RETURN(bool attention_bias, f.BoolOr("attention_bias", false));
  if (attention_bias) return absl::UnimplementedError(absl::StrCat("attention_bias=true is not supported"));
  TS_ASSIGN_OR_RETURN(bool mlp_bias, f.BoolOr("mlp_bias", false));
  if (mlp_bias) return absl::UnimplementedError("mlp_bias=true is not supported");
  if (f.Has("hidden_act")) {
    TS_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act"));
    if (act != "silu") {
      return absl::UnimplementedError(absl::StrCat("hidden_act '", act, "' is not supported"));
    }
  }
  if (f.Has("sliding_window")) {
    TS_ASSIGN_OR_RETURN(int64_t w, f.Int("sliding_window"));
    c.sliding_window = w;
  }
  if (f.Has("rope_scaling")) {
    const auto& rs = j["rope_scaling"];
    if (!rs.is_object()) return f.Error("rope_scaling", "must be an object");
    JsonFields r(rs, "rope_scaling");
    std::string type;
    if (r.Has("rope_type")) {
      TS_ASSIGN_OR_RETURN(type, r.String("rope_type"));
    } else {
      TS_ASSIGN_OR_RETURN(type, r.String("type"));
    }
    if (type == "default") {
      // no scaling
    } else if (type == "llama3") {
      RopeScaling s;
      s.type = type;
      TS_ASSIGN_OR_RETURN(s.factor, r.DoubleOr("factor", 8.0));
      TS_ASSIGN_OR_RETURN(s.low_freq_factor, r.DoubleOr("low_freq_factor", 1.0));
      TS_ASSIGN_OR_RETURN(s.high_freq_factor, r.DoubleOr("high_freq_factor", 4.0));
      TS_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                          r.IntOr("original_max_position_embeddings", 8192));
      c.rope_scaling = s;
    } else {
      return absl::UnimplementedError(
          absl::StrCat("config.json: rope_scaling type '", type, "' is not supported"));
    }
  }
  return c;
}

absl::StatusOr<MambaConfig> ParseMamba(const JsonFields& f, const nlohmann::json& j) {
  MambaConfig c;
  TS_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.state_size, f.IntOr("state_size", 16));
  TS_ASSIGN_OR_RETURN(int64_t expand, f.IntOr("expand", 2));
  TS_ASSIGN_OR_RETURN(c.intermediate_size, f.IntOr("intermediate_size", expand * c.hidden_size));
  TS_ASSIGN_OR_RETURN(c.conv_kernel, f.IntOr("conv_kernel", 4));
  for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_layers},
                      {"state_size", c.state_size},
                      {"intermediate_size", c.intermediate_size},
                      {"conv_kernel", c.conv_kernel}}) {
    TS_RETURN_IF_ERROR(Positive(f, k, v));
  }
  int64_t auto_rank = (c.hidden_size + 15) / 16;
  if (f.Has("time_step_rank") && j["time_step_rank"].is_string()) {
    if (j["time_step_rank"].get<std::string>() != "auto") {
      return f.Error("time_step_rank", "must be an integer or \"auto\"");
    }
    c.time_step_rank = auto_rank;
  } else {
    TS_ASSIGN_OR_RETURN(c.time_step_rank, f.IntOr("time_step_rank", auto_rank));
  }
  TS_RETURN_IF_ERROR(Positive(f, "time_step_rank", c.time_step_rank));
  TS_ASSIGN_OR_RETURN(c.layer_norm_epsilon, f.DoubleOr("layer_norm_epsilon", 1e-5));
  TS_ASSIGN_OR_RETURN(c.use_bias, f.BoolOr("use_bias", false));
  TS_ASSIGN_OR_RETURN(c.use_conv_bias, f.BoolOr("use_conv_bias", true));
  TS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", true));
  if (c.use_bias) return absl::UnimplementedError("mamba use_bias=true is not supported");
  return c;
}

absl::Status ReadTokenIds(const nlohmann::json& j, const std::string& key,
                          const std::string& path, std::vector<int64_t>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  const auto& v = j[key];
  if (v.is_number_integer()) {
    out->push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": field '", key, "' must hold integers"));
      }
      out->push_back(e.get<int64_t>());
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field '", key, "' must be an integer or a list, got ", v.dump()));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<float> LlamaConfig::InvFreq() const {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // As transformers: base ** (arange(0, dim, 2) / dim) in float32.
    float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(rope_theta), expo);
  }
  if (rope_scaling && rope_scaling->type == "llama3") {
    const RopeScaling& s = *rope_scaling;
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (int64_t i = 0; i < half; ++i) {
      const float f = inv[i];
      const double wavelen = 2.0 * M_PI / f;
      float scaled = wavelen > low_wavelen ? static_cast<float>(f / s.factor) : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        double smooth = (old_len / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
        scaled = static_cast<float>((1.0 - smooth) * scaled / s.factor + smooth * scaled);
      }
      inv[i] = scaled;
    }
  }
  return inv;
}

int64_t LlamaConfig::NumParameters() const {
  int64_t attn = hidden_size * head_dim * (num_heads * 2 + num_kv_heads * 2);
  int64_t mlp = 3 * hidden_size * intermediate_size;
  int64_t per_layer = attn + mlp + 2 * hidden_size;
  int64_t emb = vocab_size * hidden_size;
  return num_layers * per_layer + emb * (tie_word_embeddings ? 1 : 2) + hidden_size;
}

int64_t MambaConfig::NumParameters() const {
  const int64_t C = intermediate_size, D = hidden_size, N = state_size, R = time_step_rank;
  int64_t per_layer = D * 2 * C + C * conv_kernel + (use_conv_bias ? C : 0) + C * (R + 2 * N) +
                      R * C + C + C * N + C + C * D + D;
  return num_layers * per_layer + vocab_size * D * (tie_word_embeddings ? 1 : 2) + D;
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& path) {
  TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(json_text, path));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  JsonFields f(j, path);
  ModelConfig mc;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    mc.architecture_name = j["architectures"][0].get<std::string>();
  } else if (f.Has("model_type")) {
    TS_ASSIGN_OR_RETURN(std::string mt, f.String("model_type"));
    mc.architecture_name = mt == "llama" ? "LlamaForCausalLM"
                           : mt == "mistral" ? "MistralForCausalLM"
                           : mt == "mamba" ? "MambaForCausalLM" : mt;
  } else {
    return f.Error("architectures", "is missing (and no model_type)");
  }
  const std::string& a = mc.architecture_name;
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM") {
    mc.arch = Architecture::kLlama;
    TS_ASSIGN_OR_RETURN(mc.llama, ParseLlama(f, j));
  } else if (a == "MambaForCausalLM") {
    mc.arch = Architecture::kMamba;
    TS_ASSIGN_OR_RETURN(mc.mamba, ParseMamba(f, j));
  } else {
    return absl::UnimplementedError(
        absl::StrCat(path, ": architecture '", a,
                     "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                     "MambaForCausalLM)"));
  }
  TS_RETURN_IF_ERROR(ReadTokenIds(j, "eos_token_id", path, &mc.eos_token_ids));
  std::vector<int64_t> bos;
  TS_RETURN_IF_ERROR(ReadTokenIds(j, "bos_token_id", path, &bos));
  if (!bos.empty()) mc.bos_token_id = bos[0];
  return mc;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  if (IsGgufPath(model_dir)) {
    TS_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> f, GgufFile::Open(model_dir));
    return GgufModelConfig(*f);
  }
  const std::string path = model_dir + "/config.json";
  TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TS_ASSIGN_OR_RETURN(ModelConfig mc, ParseModelConfig(text, path));
  const std::string gen_path = model_dir + "/generation_config.json";
  if (FileExists(gen_path)) {
    TS_ASSIGN_OR_RETURN(std::string gtext, ReadFileToString(gen_path));
    TS_ASSIGN_OR_RETURN(nlohmann::json g, ParseJson(gtext, gen_path));
    std::vector<int64_t> eos;
    TS_RETURN_IF_ERROR(ReadTokenIds(g, "eos_token_id", gen_path, &eos));
    for (int64_t e : eos) {
      bool seen = false;
      for (int64_t x : mc.eos_token_ids) seen |= x == e;
      if (!seen) mc.eos_token_ids.push_back(e);
    }
  }
  return mc;
}

}  // namespace treespec
