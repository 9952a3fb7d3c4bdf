#include "core/model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/model/gguf_model.h"
#include "core/model/config_fields.h"
#include "core/model/hybrid_config.h"
#include "core/util/gguf.h"
#include "core/util/json_fields.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

// Every size in a config is at most 2^24 (config_fields.h) and the parameter
// count they make at most 2^50: products of sizes then fit in int64 with room
// to spare, and a config that names an absurd size is refused before anything
// is allocated for it.
constexpr int64_t kMaxParameters = int64_t{1} << 50;

using config_detail::CheckSilu;
using config_detail::Dimension;
using config_detail::NormalizeNonFiniteJson;

absl::Status CheckParameterCount(const std::string& path, int64_t count) {
  if (count > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": its sizes make ", count, " parameters, more than the ", kMaxParameters,
        " treespec accepts"));
  }
  return absl::OkStatus();
}

// Saturates at int64 max: configs are bounded by CheckParameterCount, but a
// LlamaConfig or MambaConfig can also be filled in by hand.
int64_t Saturate(__int128 v) {
  return v > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                 : static_cast<int64_t>(v);
}

absl::StatusOr<std::vector<double>> DoubleList(const nlohmann::json& obj, const std::string& key,
                                               size_t n) {
  const std::string where = absl::StrCat("config.json: rope parameter '", key, "'");
  if (!obj.contains(key) || !obj[key].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be a list of ", n, " numbers"));
  }
  std::vector<double> out;
  for (const auto& e : obj[key]) {
    if (!e.is_number()) return absl::InvalidArgumentError(absl::StrCat(where, " holds a non-number"));
    out.push_back(e.get<double>());
  }
  if (out.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has ", out.size(), " entries, expected head_dim / 2 = ", n));
  }
  return out;
}

// Reads RoPE from either layout into c->rope_theta / c->rope_scaling, the way
// transformers' convert_rope_params_to_dict + standardize_rope_params do.
// `partial`: the partial_rotary_factor the architecture computes with (1.0,
// or Bamba's hard-coded 0.5); a file that says otherwise is refused.
absl::Status ParseRope(const JsonFields& f, const nlohmann::json& j, double want_partial,
                       LlamaConfig* c) {
  const bool has_new = f.Has("rope_parameters"), has_old = f.Has("rope_scaling");
  // transformers prefers rope_scaling when both are present.
  const char* key = has_old ? "rope_scaling" : "rope_parameters";
  // A reference, not a copy: copying a JSON value recurses once per nesting level.
  static const nlohmann::json kNone = nlohmann::json::object();
  const nlohmann::json& rp = has_old || has_new ? j[key] : kNone;
  if (!rp.is_object()) return f.Error(key, "must be an object");
  for (const auto& [k, v] : rp.items()) {
    if (v.is_object()) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json: ", key, " nested by layer type ('", k,
          "') is not supported; treespec applies one RoPE to every layer"));
    }
  }
  JsonFields r(rp, absl::StrCat("config.json ", key));
  // The rope_parameters entry first, then the top-level field, then 10000.
  TS_ASSIGN_OR_RETURN(double top_theta, f.DoubleOr("rope_theta", 10000.0));
  TS_ASSIGN_OR_RETURN(c->rope_theta, r.DoubleOr("rope_theta", top_theta));
  if (!(c->rope_theta > 0)) return r.Error("rope_theta", "must be positive");
  TS_ASSIGN_OR_RETURN(double top_partial, f.DoubleOr("partial_rotary_factor", want_partial));
  TS_ASSIGN_OR_RETURN(double partial, r.DoubleOr("partial_rotary_factor", top_partial));
  if (partial != want_partial) {
    return absl::UnimplementedError(absl::StrCat("config.json: partial_rotary_factor ", partial,
                                                 " is not supported (only ", want_partial,
                                                 " for this architecture)"));
  }
  std::string type = "default";
  if (r.Has("rope_type")) {
    TS_ASSIGN_OR_RETURN(type, r.String("rope_type"));
  } else if (r.Has("type")) {
    TS_ASSIGN_OR_RETURN(type, r.String("type"));
  }
  if (type == "default") return absl::OkStatus();
  RopeScaling s;
  s.type = type;
  const int64_t half = c->head_dim / 2;
  TS_ASSIGN_OR_RETURN(int64_t top_orig, f.IntOr("original_max_position_embeddings",
                                                c->max_position_embeddings));
  // llama3, yarn, longrope (standardize_rope_params): a top-level
  // original_max_position_embeddings (Phi-3 style) wins over the rope entry,
  // which defaults to max_position_embeddings.
  if (f.Has("original_max_position_embeddings")) {
    s.original_max_position_embeddings = top_orig;
  } else {
    TS_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                        r.IntOr("original_max_position_embeddings", c->max_position_embeddings));
  }
  if (type == "linear" || type == "dynamic") {
    TS_ASSIGN_OR_RETURN(s.factor, r.DoubleOr("factor", -1.0));
    if (!r.Has("factor")) return r.Error("factor", "is missing");
  } else if (type == "llama3") {
    TS_ASSIGN_OR_RETURN(s.factor, r.DoubleOr("factor", -1.0));
    TS_ASSIGN_OR_RETURN(s.low_freq_factor, r.DoubleOr("low_freq_factor", -1.0));
    TS_ASSIGN_OR_RETURN(s.high_freq_factor, r.DoubleOr("high_freq_factor", -1.0));
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor"}) {
      if (!r.Has(k)) return r.Error(k, "is missing");
    }
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return r.Error("high_freq_factor", "must exceed low_freq_factor");
    }
  } else if (type == "yarn" || type == "longrope") {
    TS_ASSIGN_OR_RETURN(s.factor, r.DoubleOr("factor", static_cast<double>(c->max_position_embeddings) /
                                                           s.original_max_position_embeddings));
    if (r.Has("attention_factor")) {
      TS_ASSIGN_OR_RETURN(double af, r.DoubleOr("attention_factor", 1.0));
      s.attention_factor = af;
    }
    if (type == "yarn") {
      TS_ASSIGN_OR_RETURN(s.beta_fast, r.DoubleOr("beta_fast", 32.0));
      TS_ASSIGN_OR_RETURN(s.beta_slow, r.DoubleOr("beta_slow", 1.0));
      if (s.beta_fast == 0) s.beta_fast = 32.0;  // transformers: `or 32`
      if (s.beta_slow == 0) s.beta_slow = 1.0;
      TS_ASSIGN_OR_RETURN(s.mscale, r.DoubleOr("mscale", 0.0));
      TS_ASSIGN_OR_RETURN(s.mscale_all_dim, r.DoubleOr("mscale_all_dim", 0.0));
      TS_ASSIGN_OR_RETURN(s.truncate, r.BoolOr("truncate", true));
    } else {
      TS_ASSIGN_OR_RETURN(s.short_factor, DoubleList(rp, "short_factor", half));
      TS_ASSIGN_OR_RETURN(s.long_factor, DoubleList(rp, "long_factor", half));
    }
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "config.json: rope type '", type,
        "' is not supported (supported: default, linear, dynamic, yarn, longrope, llama3)"));
  }
  if (!(s.factor > 0)) return r.Error("factor", absl::StrCat("must be positive, got ", s.factor));
  if (s.original_max_position_embeddings <= 0) {
    return r.Error("original_max_position_embeddings", "must be positive");
  }
  c->rope_scaling = s;
  return absl::OkStatus();
}

// Biases, q/k norms and the sliding window, by architecture as transformers
// builds them (modeling_{llama,mistral,qwen2,qwen3}.py).
absl::Status ParseBiasesAndWindow(const JsonFields& f, const nlohmann::json& j,
                                  const std::string& arch, LlamaConfig* c) {
  const bool is_llama = arch == "LlamaForCausalLM", is_mistral = arch == "MistralForCausalLM";
  const bool is_qwen2 = arch == "Qwen2ForCausalLM", is_qwen3 = arch == "Qwen3ForCausalLM";
  const bool is_bamba = arch == "BambaForCausalLM";
  if (is_llama || is_qwen3 || is_bamba) {
    TS_ASSIGN_OR_RETURN(bool attention_bias, f.BoolOr("attention_bias", false));
    c->qkv_bias = c->o_bias = attention_bias;
  }
  if (is_qwen2) c->qkv_bias = true;
  if (is_llama || is_bamba) {
    TS_ASSIGN_OR_RETURN(c->mlp_bias, f.BoolOr("mlp_bias", false));
  }
  c->qk_norm = is_qwen3;
  if (is_mistral) {
    // MistralConfig: a missing sliding_window means 4096, null means none.
    if (!j.contains("sliding_window")) {
      c->sliding_window = 4096;
    } else if (!j["sliding_window"].is_null()) {
      TS_ASSIGN_OR_RETURN(int64_t w, f.Int("sliding_window"));
      c->sliding_window = w;
    }
  }
  if (is_qwen2 || is_qwen3) {
    // Qwen2/3Config: layers i >= max_window_layers slide when use_sliding_window.
    TS_ASSIGN_OR_RETURN(bool use, f.BoolOr("use_sliding_window", false));
    std::optional<int64_t> window;
    if (use && !(j.contains("sliding_window") && j["sliding_window"].is_null())) {
      TS_ASSIGN_OR_RETURN(window, f.IntOr("sliding_window", 4096));
    }
    std::vector<bool> sliding(c->num_layers, false);
    if (f.Has("layer_types")) {
      const auto& lt = j["layer_types"];
      if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c->num_layers) {
        return f.Error("layer_types", "must be a list with one entry per layer");
      }
      for (int64_t i = 0; i < c->num_layers; ++i) {
        std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
        if (t != "full_attention" && t != "sliding_attention") {
          return f.Error("layer_types", absl::StrCat("entry ", i, " is ", JsonExcerpt(lt[i])));
        }
        sliding[i] = t == "sliding_attention";
      }
    } else if (window) {
      TS_ASSIGN_OR_RETURN(int64_t max_window_layers, f.IntOr("max_window_layers", 28));
      for (int64_t i = std::max<int64_t>(max_window_layers, 0); i < c->num_layers; ++i) {
        sliding[i] = true;
      }
    }
    int64_t num_sliding = 0;
    for (bool b : sliding) num_sliding += b;
    if (window && num_sliding == c->num_layers) {
      c->sliding_window = window;
    } else if (window && num_sliding > 0) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json: use_sliding_window with ", num_sliding, " of ", c->num_layers,
          " layers sliding (max_window_layers / layer_types) is not supported; treespec applies "
          "one window to every layer"));
    }
  }
  if (c->sliding_window && *c->sliding_window <= 0) {
    return f.Error("sliding_window", absl::StrCat("must be positive, got ", *c->sliding_window));
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaConfig> ParseLlama(const JsonFields& f, const nlohmann::json& j,
                                       const std::string& arch) {
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
    TS_RETURN_IF_ERROR(Dimension(f, k, v));
  }
  TS_ASSIGN_OR_RETURN(c.num_kv_heads, f.IntOr("num_key_value_heads", c.num_heads));
  TS_RETURN_IF_ERROR(Dimension(f, "num_key_value_heads", c.num_kv_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return f.Error("num_key_value_heads",
                   absl::StrCat("(", c.num_kv_heads, ") must divide num_attention_heads (",
                                c.num_heads, ")"));
  }
  // transformers' Qwen3Config defaults head_dim to 128; the others derive it.
  TS_ASSIGN_OR_RETURN(c.head_dim, f.IntOr("head_dim", arch == "Qwen3ForCausalLM"
                                                          ? 128
                                                          : c.hidden_size / c.num_heads));
  TS_RETURN_IF_ERROR(Dimension(f, "head_dim", c.head_dim));
  if (c.head_dim % 2 != 0) {
    return f.Error("head_dim", absl::StrCat("must be even, got ", c.head_dim));
  }
  TS_ASSIGN_OR_RETURN(c.rms_norm_eps, f.DoubleOr("rms_norm_eps", 1e-6));
  TS_ASSIGN_OR_RETURN(c.max_position_embeddings, f.IntOr("max_position_embeddings", 2048));
  TS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", false));
  TS_RETURN_IF_ERROR(CheckSilu(f, "hidden_act"));
  // BambaConfig hard-codes partial_rotary_factor 0.5 (rotate-half on the
  // first half of each head), with default RoPE frequencies over that half.
  const bool bamba = arch == "BambaForCausalLM";
  TS_RETURN_IF_ERROR(ParseRope(f, j, bamba ? 0.5 : 1.0, &c));
  if (bamba) {
    c.rotary_dim = c.head_dim / 2;
    if (c.rotary_dim % 2 != 0) {
      return f.Error("head_dim", absl::StrCat("must be a multiple of 4 (half of it rotates), got ",
                                              c.head_dim));
    }
    if (c.rope_scaling) {
      return absl::UnimplementedError(absl::StrCat("config.json: rope type '",
                                                   c.rope_scaling->type,
                                                   "' with partial rotary is not supported"));
    }
  }
  TS_RETURN_IF_ERROR(ParseBiasesAndWindow(f, j, arch, &c));
  return c;
}

absl::StatusOr<MambaConfig> ParseMamba(const JsonFields& f, const nlohmann::json& j) {
  MambaConfig c;
  TS_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.state_size, f.IntOr("state_size", 16));
  TS_ASSIGN_OR_RETURN(int64_t expand, f.IntOr("expand", 2));
  TS_ASSIGN_OR_RETURN(c.conv_kernel, f.IntOr("conv_kernel", 4));
  for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_layers},
                      {"state_size", c.state_size},
                      {"expand", expand},
                      {"conv_kernel", c.conv_kernel}}) {
    TS_RETURN_IF_ERROR(Dimension(f, k, v));
  }
  TS_ASSIGN_OR_RETURN(c.intermediate_size, f.IntOr("intermediate_size", expand * c.hidden_size));
  TS_RETURN_IF_ERROR(Dimension(f, "intermediate_size", c.intermediate_size));
  int64_t auto_rank = (c.hidden_size + 15) / 16;
  if (f.Has("time_step_rank") && j["time_step_rank"].is_string()) {
    if (j["time_step_rank"].get<std::string>() != "auto") {
      return f.Error("time_step_rank", "must be an integer or \"auto\"");
    }
    c.time_step_rank = auto_rank;
  } else {
    TS_ASSIGN_OR_RETURN(c.time_step_rank, f.IntOr("time_step_rank", auto_rank));
  }
  TS_RETURN_IF_ERROR(Dimension(f, "time_step_rank", c.time_step_rank));
  TS_ASSIGN_OR_RETURN(c.layer_norm_epsilon, f.DoubleOr("layer_norm_epsilon", 1e-5));
  TS_ASSIGN_OR_RETURN(c.use_bias, f.BoolOr("use_bias", false));
  TS_ASSIGN_OR_RETURN(c.use_conv_bias, f.BoolOr("use_conv_bias", true));
  TS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", true));
  if (c.use_bias) return absl::UnimplementedError("mamba use_bias=true is not supported");
  // MambaMixer applies ACT2FN[hidden_act] after the conv and to the gate.
  TS_RETURN_IF_ERROR(CheckSilu(f, "hidden_act"));
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
        absl::StrCat(path, ": field '", key, "' must be an integer or a list, got ", JsonExcerpt(v)));
  }
  return absl::OkStatus();
}

}  // namespace

// Mirrors transformers' modeling_rope_utils.py _compute_*_parameters,
// including which steps run in float32 (tensors) and which in double (Python
// floats), so the frequencies match bit for bit or within one float32 ulp.
std::vector<float> LlamaConfig::InvFreq() const {
  const int64_t half = RotaryDim() / 2;
  const float dim = static_cast<float>(RotaryDim());
  double base = rope_theta;
  const RopeScaling* s = rope_scaling ? &*rope_scaling : nullptr;
  if (s != nullptr && s->type == "dynamic") {
    // At initialisation (and for every sequence length up to
    // max_position_embeddings, the only ones MaxExactPosition admits)
    // seq_len = max_position_embeddings.
    const double seq_len = static_cast<double>(max_position_embeddings);
    base = base * std::pow(s->factor * seq_len / static_cast<double>(max_position_embeddings) -
                               (s->factor - 1.0),
                           static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
  }
  // base ** (arange(0, dim, 2) / dim) in float32.
  std::vector<float> pos_freq(half), inv(half);
  for (int64_t i = 0; i < half; ++i) {
    pos_freq[i] = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / dim);
    inv[i] = 1.0f / pos_freq[i];
  }
  if (s == nullptr || s->type == "dynamic") return inv;
  if (s->type == "linear") {
    for (float& f : inv) f = f / static_cast<float>(s->factor);
  } else if (s->type == "llama3") {
    const double old_len = static_cast<double>(s->original_max_position_embeddings);
    const double low_wavelen = old_len / s->low_freq_factor;
    const double high_wavelen = old_len / s->high_freq_factor;
    for (int64_t i = 0; i < half; ++i) {
      const float f = inv[i];
      const double wavelen = 2.0 * M_PI / f;
      float scaled = wavelen > low_wavelen ? static_cast<float>(f / s->factor) : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        double smooth = (old_len / wavelen - s->low_freq_factor) /
                        (s->high_freq_factor - s->low_freq_factor);
        scaled = static_cast<float>((1.0 - smooth) * scaled / s->factor + smooth * scaled);
      }
      inv[i] = scaled;
    }
  } else if (s->type == "yarn") {
    const double d = static_cast<double>(head_dim);
    const double orig = static_cast<double>(s->original_max_position_embeddings);
    auto correction_dim = [&](double num_rotations) {
      return (d * std::log(orig / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(s->beta_fast), high = correction_dim(s->beta_slow);
    if (s->truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1);
    if (low == high) high += 0.001;
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    const float factor = static_cast<float>(s->factor);
    for (int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interp = 1.0f / (factor * pos_freq[i]);
      inv[i] = interp * (1.0f - extrapolation) + inv[i] * extrapolation;
    }
  } else if (s->type == "longrope") {
    // Short factors: sequence lengths up to original_max_position_embeddings.
    for (int64_t i = 0; i < half; ++i) {
      inv[i] = 1.0f / (static_cast<float>(s->short_factor[i]) * pos_freq[i]);
    }
  }
  return inv;
}

double LlamaConfig::RopeAttentionFactor() const {
  if (!rope_scaling) return 1.0;
  const RopeScaling& s = *rope_scaling;
  if (s.attention_factor) return *s.attention_factor;
  if (s.type == "yarn") {
    auto mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    if (s.mscale != 0 && s.mscale_all_dim != 0) {
      return mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim);
    }
    return mscale(s.factor, 1.0);
  }
  if (s.type == "longrope") {
    if (s.factor <= 1.0) return 1.0;
    return std::sqrt(1 + std::log(s.factor) /
                             std::log(static_cast<double>(s.original_max_position_embeddings)));
  }
  return 1.0;
}

int64_t LlamaConfig::MaxExactPosition() const {
  if (rope_scaling && rope_scaling->type == "dynamic") return max_position_embeddings;
  if (rope_scaling && rope_scaling->type == "longrope") {
    return rope_scaling->original_max_position_embeddings;
  }
  return std::numeric_limits<int64_t>::max();
}

int64_t LlamaConfig::NumParameters() const {
  using W = __int128;  // sizes up to 2^24 each: products stay far below 2^127
  const W hidden = hidden_size, inter = intermediate_size, hd = head_dim;
  const W attn = hidden * hd * (W{num_heads} * 2 + W{num_kv_heads} * 2);
  const W mlp = 3 * hidden * inter;
  W per_layer = attn + mlp + 2 * hidden;
  if (qkv_bias) per_layer += (W{num_heads} + 2 * W{num_kv_heads}) * hd;
  if (o_bias) per_layer += hidden;
  if (mlp_bias) per_layer += 2 * inter + hidden;
  if (qk_norm) per_layer += 2 * hd;
  const W emb = W{vocab_size} * hidden;
  return Saturate(W{num_layers} * per_layer + emb * (tie_word_embeddings ? 1 : 2) + hidden);
}

int64_t MambaConfig::NumParameters() const {
  using W = __int128;
  const W C = intermediate_size, D = hidden_size, N = state_size, R = time_step_rank;
  const W per_layer = D * 2 * C + C * conv_kernel + (use_conv_bias ? C : 0) + C * (R + 2 * N) +
                      R * C + C + C * N + C + C * D + D;
  return Saturate(W{num_layers} * per_layer + W{vocab_size} * D * (tie_word_embeddings ? 1 : 2) +
                  D);
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& path) {
  // transformers < 5 writes time_step_limit's infinity as a bare Infinity.
  TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(NormalizeNonFiniteJson(json_text), path));
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
                           : mt == "qwen2" ? "Qwen2ForCausalLM"
                           : mt == "qwen3" ? "Qwen3ForCausalLM"
                           : mt == "mamba" ? "MambaForCausalLM"
                           : mt == "mamba2" ? "Mamba2ForCausalLM"
                           : mt == "bamba" ? "BambaForCausalLM" : mt;
  } else {
    return f.Error("architectures", "is missing (and no model_type)");
  }
  const std::string& a = mc.architecture_name;
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM" || a == "Qwen2ForCausalLM" ||
      a == "Qwen3ForCausalLM") {
    mc.arch = Architecture::kLlama;
    TS_ASSIGN_OR_RETURN(mc.llama, ParseLlama(f, j, a));
    TS_RETURN_IF_ERROR(CheckParameterCount(path, mc.llama.NumParameters()));
  } else if (a == "MambaForCausalLM") {
    mc.arch = Architecture::kMamba;
    TS_ASSIGN_OR_RETURN(mc.mamba, ParseMamba(f, j));
    TS_RETURN_IF_ERROR(CheckParameterCount(path, mc.mamba.NumParameters()));
  } else if (a == "Mamba2ForCausalLM") {
    mc.arch = Architecture::kMamba2;
    TS_ASSIGN_OR_RETURN(mc.hybrid, ParseMamba2Config(f, j));
    TS_RETURN_IF_ERROR(CheckParameterCount(path, mc.hybrid.NumParameters()));
  } else if (a == "BambaForCausalLM") {
    mc.arch = Architecture::kHybrid;
    TS_ASSIGN_OR_RETURN(LlamaConfig attn, ParseLlama(f, j, a));
    TS_ASSIGN_OR_RETURN(mc.hybrid, ParseBambaConfig(f, j, attn));
    TS_RETURN_IF_ERROR(CheckParameterCount(path, mc.hybrid.NumParameters()));
  } else {
    return absl::UnimplementedError(absl::StrCat(
        path, ": architecture '", a,
        "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
        "Qwen3ForCausalLM, MambaForCausalLM, Mamba2ForCausalLM, BambaForCausalLM)"));
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
