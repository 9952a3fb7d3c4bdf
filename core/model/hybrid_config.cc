#include "core/model/hybrid_config.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/model/config_fields.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

using config_detail::CheckSilu;
using config_detail::Dimension;

// time_step_limit: transformers clamps dt to it in its chunked prefill but
// not in its one-token decode step (mamba_ssm does the same), so only the
// default [0, inf], where the clamp never acts (softplus >= 0), gives one
// model; anything else is refused.
absl::Status CheckTimeStepLimit(const JsonFields& f, const nlohmann::json& j) {
  if (!j.contains("time_step_limit") || j["time_step_limit"].is_null()) return absl::OkStatus();
  const nlohmann::json& v = j["time_step_limit"];
  auto value = [](const nlohmann::json& e) {
    if (e.is_number()) return e.get<double>();
    if (e.is_object() && e.size() == 1 && e.contains("__float__") && e["__float__"].is_string()) {
      const std::string s = e["__float__"].get<std::string>();
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    }
    return std::numeric_limits<double>::quiet_NaN();
  };
  if (!v.is_array() || v.size() != 2) return f.Error("time_step_limit", "must be a list of two numbers");
  const double lo = value(v[0]), hi = value(v[1]);
  if (lo != 0.0 || !(std::isinf(hi) && hi > 0)) {
    return absl::UnimplementedError(absl::StrCat(
        "config.json: time_step_limit ", JsonExcerpt(v),
        " is not supported (only [0, inf]: transformers clamps dt to it when prefilling but not "
        "when decoding one token, so no single recurrence reproduces both)"));
  }
  return absl::OkStatus();
}

// The mixer sizes shared by both layouts, checked.
absl::Status CheckMixer(const JsonFields& f, const nlohmann::json& j, const HybridConfig& c,
                        const char* heads_key, const char* groups_key) {
  if (c.ssm_heads % c.ssm_groups != 0) {
    return f.Error(groups_key, absl::StrCat("(", c.ssm_groups, ") must divide ", heads_key, " (",
                                            c.ssm_heads, ")"));
  }
  TS_RETURN_IF_ERROR(CheckSilu(f, "hidden_act"));
  return CheckTimeStepLimit(f, j);
}

}  // namespace

absl::StatusOr<HybridConfig> ParseMamba2Config(const JsonFields& f, const nlohmann::json& j) {
  HybridConfig c;
  c.layout = HybridConfig::Layout::kMamba2;
  TS_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.ssm_heads, f.Int("num_heads"));
  TS_ASSIGN_OR_RETURN(c.ssm_head_dim, f.IntOr("head_dim", 64));
  TS_ASSIGN_OR_RETURN(c.ssm_state, f.IntOr("state_size", 128));
  TS_ASSIGN_OR_RETURN(c.ssm_groups, f.IntOr("n_groups", 8));
  TS_ASSIGN_OR_RETURN(c.conv_kernel, f.IntOr("conv_kernel", 4));
  TS_ASSIGN_OR_RETURN(c.chunk_size, f.IntOr("chunk_size", 256));
  TS_ASSIGN_OR_RETURN(int64_t expand, f.IntOr("expand", 2));
  for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size}, {"num_hidden_layers", c.num_layers},
                      {"num_heads", c.ssm_heads}, {"head_dim", c.ssm_head_dim},
                      {"state_size", c.ssm_state}, {"n_groups", c.ssm_groups},
                      {"conv_kernel", c.conv_kernel}, {"chunk_size", c.chunk_size},
                      {"expand", expand}}) {
    TS_RETURN_IF_ERROR(Dimension(f, k, v));
  }
  if (expand * c.hidden_size != c.ssm_heads * c.ssm_head_dim) {
    return f.Error("expand", absl::StrCat("· hidden_size (", expand * c.hidden_size,
                                          ") must equal num_heads · head_dim (",
                                          c.ssm_heads * c.ssm_head_dim, ")"));
  }
  TS_ASSIGN_OR_RETURN(c.norm_eps, f.DoubleOr("layer_norm_epsilon", 1e-5));
  TS_ASSIGN_OR_RETURN(c.proj_bias, f.BoolOr("use_bias", false));
  TS_ASSIGN_OR_RETURN(c.conv_bias, f.BoolOr("use_conv_bias", true));
  TS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", false));
  // The residual stream is float32 here either way (activations are f32).
  TS_RETURN_IF_ERROR(f.BoolOr("residual_in_fp32", true).status());
  TS_RETURN_IF_ERROR(CheckMixer(f, j, c, "num_heads", "n_groups"));
  c.attention.assign(c.num_layers, false);
  return c;
}

absl::StatusOr<HybridConfig> ParseBambaConfig(const JsonFields& f, const nlohmann::json& j,
                                              const LlamaConfig& attn) {
  HybridConfig c;
  c.layout = HybridConfig::Layout::kBamba;
  c.attn = attn;
  c.vocab_size = attn.vocab_size;
  c.hidden_size = attn.hidden_size;
  c.num_layers = attn.num_layers;
  c.norm_eps = attn.rms_norm_eps;
  c.tie_word_embeddings = attn.tie_word_embeddings;
  c.has_mlp = true;
  TS_ASSIGN_OR_RETURN(c.ssm_heads, f.IntOr("mamba_n_heads", 128));
  TS_ASSIGN_OR_RETURN(c.ssm_groups, f.IntOr("mamba_n_groups", 1));
  TS_ASSIGN_OR_RETURN(c.ssm_state, f.IntOr("mamba_d_state", 256));
  TS_ASSIGN_OR_RETURN(c.conv_kernel, f.IntOr("mamba_d_conv", 4));
  TS_ASSIGN_OR_RETURN(c.chunk_size, f.IntOr("mamba_chunk_size", 256));
  TS_ASSIGN_OR_RETURN(int64_t expand, f.IntOr("mamba_expand", 2));
  TS_ASSIGN_OR_RETURN(c.conv_bias, f.BoolOr("mamba_conv_bias", true));
  TS_ASSIGN_OR_RETURN(c.proj_bias, f.BoolOr("mamba_proj_bias", false));
  for (auto [k, v] : {std::pair<const char*, int64_t>{"mamba_n_heads", c.ssm_heads},
                      {"mamba_n_groups", c.ssm_groups}, {"mamba_d_state", c.ssm_state},
                      {"mamba_d_conv", c.conv_kernel}, {"mamba_chunk_size", c.chunk_size},
                      {"mamba_expand", expand}}) {
    TS_RETURN_IF_ERROR(Dimension(f, k, v));
  }
  const int64_t inner = expand * c.hidden_size;
  if (f.Has("mamba_d_head") && j["mamba_d_head"].is_string()) {
    if (j["mamba_d_head"].get<std::string>() != "auto") {
      return f.Error("mamba_d_head", "must be an integer or \"auto\"");
    }
    c.ssm_head_dim = inner / c.ssm_heads;
  } else {
    TS_ASSIGN_OR_RETURN(c.ssm_head_dim, f.IntOr("mamba_d_head", inner / c.ssm_heads));
  }
  TS_RETURN_IF_ERROR(Dimension(f, "mamba_d_head", c.ssm_head_dim));
  if (c.ssm_head_dim * c.ssm_heads != inner) {
    return f.Error("mamba_d_head", absl::StrCat("· mamba_n_heads must equal mamba_expand · "
                                                "hidden_size (", inner, ")"));
  }
  TS_RETURN_IF_ERROR(CheckMixer(f, j, c, "mamba_n_heads", "mamba_n_groups"));
  c.attention.assign(c.num_layers, false);
  if (j.contains("attn_layer_indices") && !j["attn_layer_indices"].is_null()) {
    const nlohmann::json& idx = j["attn_layer_indices"];
    if (!idx.is_array()) return f.Error("attn_layer_indices", "must be a list of layer indices");
    for (const auto& e : idx) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= c.num_layers) {
        return f.Error("attn_layer_indices",
                       absl::StrCat("holds ", JsonExcerpt(e), ", not a layer in [0, ",
                                    c.num_layers, ")"));
      }
      c.attention[e.get<int64_t>()] = true;
    }
  }
  return c;
}

int64_t HybridConfig::num_attention_layers() const {
  int64_t n = 0;
  for (bool a : attention) n += a;
  return n;
}

int64_t HybridConfig::NumParameters() const {
  using W = __int128;  // sizes up to 2^24 each: products stay far below 2^127
  const W D = hidden_size, di = ssm_inner(), cd = conv_dim(), H = ssm_heads;
  W ssm = D * (di + cd + H) + cd * conv_kernel + 3 * H + di + di * D + D;
  if (conv_bias) ssm += cd;
  if (proj_bias) ssm += di + cd + H + D;
  const W hd = attn.head_dim;
  W att = D * hd * (W{attn.num_heads} * 2 + W{attn.num_kv_heads} * 2) + D;
  if (attn.qkv_bias) att += (W{attn.num_heads} + 2 * W{attn.num_kv_heads}) * hd;
  if (attn.o_bias) att += D;
  W mlp = has_mlp ? 3 * D * W{attn.intermediate_size} + D : 0;
  if (has_mlp && attn.mlp_bias) mlp += 2 * W{attn.intermediate_size} + D;
  const W n_att = num_attention_layers();
  const W total = n_att * att + (W{num_layers} - n_att) * ssm + W{num_layers} * mlp +
                  W{vocab_size} * D * (tie_word_embeddings ? 1 : 2) + D;
  return total > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                     : static_cast<int64_t>(total);
}

}  // namespace treespec
