// HybridModel's construction: sharding checks and weight loading, each rank
// reading only its slices (hybrid.h says which).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/model/hybrid.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

absl::Status Divisible(const char* what, int64_t n, int tp) {
  if (n % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", what, " (", n,
                                                   ") is not divisible by tp size ", tp));
  }
  return absl::OkStatus();
}

bool IsMamba2(const HybridConfig& c) { return c.layout == HybridConfig::Layout::kMamba2; }

uint64_t NameSeed(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A small tensor as host float32; random weights: fallback(i), or uniform in
// [-scale, scale] when fallback is null.
absl::StatusOr<std::vector<float>> SmallF32(WeightLoader* loader, const std::string& name,
                                            const Shape& shape, float (*fallback)(int64_t),
                                            float scale = 0.5f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  if (loader->is_random()) {
    for (int64_t i = 0; i < n; ++i) {
      v[i] = fallback != nullptr ? fallback(i) : FillUniformValue(NameSeed(name), i, scale);
    }
    return v;
  }
  TS_ASSIGN_OR_RETURN(const TensorInfo* info, loader->checkpoint()->Find(name, shape));
  ConvertToF32(info->data, info->dtype, n, v.data());
  return v;
}

// Rows [r0, r1) of each range of a host matrix of `width` columns, concatenated.
std::vector<float> PickRows(const std::vector<float>& v, int64_t width,
                            const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<float> out;
  for (auto [r0, r1] : ranges) out.insert(out.end(), v.begin() + r0 * width, v.begin() + r1 * width);
  return out;
}

absl::StatusOr<Tensor> UploadAs(Backend* be, const std::vector<float>& v, Shape shape, DType dt) {
  TS_ASSIGN_OR_RETURN(Tensor t, be->Alloc(dt, std::move(shape)));
  TS_RETURN_IF_ERROR(be->Upload(v.data(), DType::kF32, &t));
  return t;
}

}  // namespace

absl::Status HybridModel::CheckShardable(const HybridConfig& c, int tp) {
  const bool m2 = IsMamba2(c);
  TS_RETURN_IF_ERROR(Divisible(m2 ? "num_heads" : "mamba_n_heads", c.ssm_heads, tp));
  if (c.ssm_groups % tp != 0 && c.ssm_groups != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: ", m2 ? "n_groups" : "mamba_n_groups", " (", c.ssm_groups,
        ") must be 1 (B and C replicated) or divisible by tp size ", tp));
  }
  if (c.num_attention_layers() > 0) {
    TS_RETURN_IF_ERROR(Divisible("num_attention_heads", c.attn.num_heads, tp));
    TS_RETURN_IF_ERROR(Divisible("num_key_value_heads", c.attn.num_kv_heads, tp));
  }
  if (c.has_mlp) TS_RETURN_IF_ERROR(Divisible("intermediate_size", c.attn.intermediate_size, tp));
  return Divisible("vocab_size", c.vocab_size, tp);
}

std::string HybridModel::Name(int64_t layer, const char* suffix) const {
  return absl::StrCat(IsMamba2(config_) ? "backbone.layers." : "model.layers.", layer, ".", suffix);
}

absl::StatusOr<std::unique_ptr<HybridModel>> HybridModel::Create(const HybridConfig& config,
                                                                 WeightLoader* loader,
                                                                 Communicator* comm) {
  auto m = std::unique_ptr<HybridModel>(new HybridModel());
  m->config_ = config;
  m->backend_ = loader->backend();
  m->workspace_.set_backend(m->backend_);
  m->comm_ = comm;
  if (comm != nullptr) {
    m->tp_ = comm->size();
    m->rank_ = comm->rank();
  }
  const int tp = m->tp_, r = m->rank_;
  TS_RETURN_IF_ERROR(CheckShardable(config, tp));
  m->ssm_heads_ = config.ssm_heads / tp;
  m->ssm_inner_ = m->ssm_heads_ * config.ssm_head_dim;
  m->groups_split_ = config.ssm_groups % tp == 0;
  m->ssm_groups_ = m->groups_split_ ? config.ssm_groups / tp : config.ssm_groups;
  m->conv_dim_ = m->ssm_inner_ + 2 * m->ssm_groups_ * config.ssm_state;
  m->heads_ = config.attn.num_heads / tp;
  m->kv_heads_ = config.attn.num_kv_heads / tp;
  m->ffn_ = config.attn.intermediate_size / tp;
  m->vocab_shard_ = config.vocab_size / tp;
  const int64_t V = config.vocab_size, D = config.hidden_size;
  const bool m2 = IsMamba2(config);
  const std::string embed = m2 ? "backbone.embeddings.weight" : "model.embed_tokens.weight";
  TS_ASSIGN_OR_RETURN(m->embed_, loader->Load(embed, {V, D}));
  TS_ASSIGN_OR_RETURN(m->norm_f_, loader->LoadNorm(m2 ? "backbone.norm_f.weight"
                                                      : "model.final_layernorm.weight",
                                                   {D}));
  const int64_t v0 = r * m->vocab_shard_, v1 = (r + 1) * m->vocab_shard_;
  if (config.tie_word_embeddings) {
    if (loader->checkpoint() != nullptr) loader->checkpoint()->Ignore("lm_head.weight");
    if (tp == 1) {
      m->lm_head_ = m->embed_;
    } else {
      TS_ASSIGN_OR_RETURN(m->lm_head_, loader->LoadRows({{embed, {V, D}, v0, v1}}));
    }
  } else {
    TS_ASSIGN_OR_RETURN(m->lm_head_, loader->LoadRows({{"lm_head.weight", {V, D}, v0, v1}}));
  }
  int64_t num_attn = 0, num_ssm = 0;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    Layer layer;
    layer.is_attention = config.attention[i];
    layer.index = layer.is_attention ? num_attn++ : num_ssm++;
    TS_ASSIGN_OR_RETURN(layer.ln1, loader->LoadNorm(m->Name(i, m2 ? "norm.weight"
                                                                   : "input_layernorm.weight"),
                                                    {D}));
    if (layer.is_attention) {
      TS_RETURN_IF_ERROR(m->LoadAttention(i, loader, &layer));
    } else {
      TS_RETURN_IF_ERROR(m->LoadMixer(i, loader, &layer.mixer));
    }
    if (config.has_mlp) TS_RETURN_IF_ERROR(m->LoadMlp(i, loader, &layer));
    m->layers_.push_back(std::move(layer));
  }
  if (num_attn > 0) {
    const std::vector<float> inv = config.attn.InvFreq();
    TS_ASSIGN_OR_RETURN(m->inv_freq_, UploadAs(m->backend_, inv,
                                               {static_cast<int64_t>(inv.size())}, DType::kF32));
  }
  return m;
}

absl::Status HybridModel::LoadMixer(int64_t i, WeightLoader* loader, Mixer* m) {
  const HybridConfig& c = config_;
  Backend* be = backend_;
  const DType act = be->activation_dtype();
  const std::string p = IsMamba2(c) ? "mixer." : "mamba.";
  auto name = [&](const char* s) { return Name(i, (p + s).c_str()); };
  const int64_t D = c.hidden_size, di = c.ssm_inner(), cd = c.conv_dim(), H = c.ssm_heads;
  const int64_t GN = c.ssm_groups * c.ssm_state, K = c.conv_kernel;
  const int64_t x0 = rank_ * ssm_inner_, x1 = x0 + ssm_inner_;
  const int64_t g0 = groups_split_ ? rank_ * ssm_groups_ * c.ssm_state : 0;
  const int64_t g1 = g0 + ssm_groups_ * c.ssm_state;
  const int64_t h0 = rank_ * ssm_heads_, h1 = h0 + ssm_heads_;
  // This rank's conv channels (x | B | C) and in_proj rows (z | x | B | C | dt).
  const std::vector<std::pair<int64_t, int64_t>> chans = {
      {x0, x1}, {di + g0, di + g1}, {di + GN + g0, di + GN + g1}};
  std::vector<std::pair<int64_t, int64_t>> rows = {{x0, x1}};
  for (auto [a, b] : chans) rows.push_back({di + a, di + b});
  rows.push_back({di + cd + h0, di + cd + h1});
  const int64_t P = di + cd + H;
  std::vector<RowPart> w_parts, b_parts;
  for (auto [a, b] : rows) {
    w_parts.push_back({name("in_proj.weight"), {P, D}, a, b});
    b_parts.push_back({name("in_proj.bias"), {P}, a, b});
  }
  TS_ASSIGN_OR_RETURN(m->in_proj, loader->LoadRows(w_parts));
  if (c.proj_bias) {
    TS_ASSIGN_OR_RETURN(m->in_bias, loader->LoadRows(b_parts));
    TS_ASSIGN_OR_RETURN(m->out_bias, loader->Load(name("out_proj.bias"), {D}));
  }
  TS_ASSIGN_OR_RETURN(m->out_proj, loader->LoadCols(name("out_proj.weight"), {D, di}, x0, x1));
  TS_ASSIGN_OR_RETURN(std::vector<float> conv, SmallF32(loader, name("conv1d.weight"), {cd, 1, K},
                                                        nullptr));
  TS_ASSIGN_OR_RETURN(m->conv_w, UploadAs(be, PickRows(conv, K, chans), {conv_dim_, K}, act));
  std::vector<float> conv_b(cd, 0.0f);
  if (c.conv_bias) {
    TS_ASSIGN_OR_RETURN(conv_b, SmallF32(loader, name("conv1d.bias"), {cd}, nullptr, 0.1f));
  }
  TS_ASSIGN_OR_RETURN(m->conv_b, UploadAs(be, PickRows(conv_b, 1, chans), {conv_dim_}, act));
  TS_ASSIGN_OR_RETURN(std::vector<float> a_log,
                      SmallF32(loader, name("A_log"), {H},
                               [](int64_t h) { return std::log(static_cast<float>(h + 1)); }));
  for (float& a : a_log) a = -std::exp(a);
  TS_ASSIGN_OR_RETURN(m->A, UploadAs(be, PickRows(a_log, 1, {{h0, h1}}), {ssm_heads_}, DType::kF32));
  TS_ASSIGN_OR_RETURN(std::vector<float> dt_bias,
                      SmallF32(loader, name("dt_bias"), {H}, [](int64_t) { return -4.0f; }));
  TS_ASSIGN_OR_RETURN(m->dt_bias, UploadAs(be, PickRows(dt_bias, 1, {{h0, h1}}), {ssm_heads_},
                                           DType::kF32));
  TS_ASSIGN_OR_RETURN(std::vector<float> d, SmallF32(loader, name("D"), {H},
                                                     [](int64_t) { return 1.0f; }));
  TS_ASSIGN_OR_RETURN(m->D, UploadAs(be, PickRows(d, 1, {{h0, h1}}), {ssm_heads_}, DType::kF32));
  TS_ASSIGN_OR_RETURN(std::vector<float> norm, SmallF32(loader, name("norm.weight"), {di},
                                                        [](int64_t) { return 1.0f; }));
  TS_ASSIGN_OR_RETURN(m->norm, UploadAs(be, PickRows(norm, 1, {{x0, x1}}), {ssm_inner_}, act));
  return absl::OkStatus();
}

absl::Status HybridModel::LoadAttention(int64_t i, WeightLoader* loader, Layer* layer) {
  const LlamaConfig& c = config_.attn;
  const int64_t D = config_.hidden_size, Dh = c.head_dim, H = c.num_heads, Hkv = c.num_kv_heads;
  const int64_t q0 = rank_ * heads_ * Dh, q1 = q0 + heads_ * Dh;
  const int64_t k0 = rank_ * kv_heads_ * Dh, k1 = k0 + kv_heads_ * Dh;
  auto name = [&](const char* s) { return Name(i, (std::string("self_attn.") + s).c_str()); };
  Attention& a = layer->attn;
  TS_ASSIGN_OR_RETURN(a.w_qkv,
                      loader->LoadRowBlocks({{name("q_proj.weight"), {H * Dh, D}, q0, q1},
                                             {name("k_proj.weight"), {Hkv * Dh, D}, k0, k1},
                                             {name("v_proj.weight"), {Hkv * Dh, D}, k0, k1}}));
  TS_ASSIGN_OR_RETURN(a.w_o, loader->LoadCols(name("o_proj.weight"), {D, H * Dh}, q0, q1));
  if (c.qkv_bias) {
    TS_ASSIGN_OR_RETURN(a.b_qkv, loader->LoadRows({{name("q_proj.bias"), {H * Dh}, q0, q1},
                                                   {name("k_proj.bias"), {Hkv * Dh}, k0, k1},
                                                   {name("v_proj.bias"), {Hkv * Dh}, k0, k1}}));
  }
  if (c.o_bias) {
    TS_ASSIGN_OR_RETURN(a.b_o, loader->Load(name("o_proj.bias"), {D}));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::LoadMlp(int64_t i, WeightLoader* loader, Layer* layer) {
  const LlamaConfig& c = config_.attn;
  const int64_t D = config_.hidden_size, F = c.intermediate_size;
  const int64_t f0 = rank_ * ffn_, f1 = f0 + ffn_;
  auto name = [&](const char* s) { return Name(i, (std::string("feed_forward.") + s).c_str()); };
  TS_ASSIGN_OR_RETURN(layer->ln2, loader->LoadNorm(Name(i, "pre_ff_layernorm.weight"), {D}));
  TS_ASSIGN_OR_RETURN(layer->w_gate_up,
                      loader->LoadRowBlocks({{name("gate_proj.weight"), {F, D}, f0, f1},
                                             {name("up_proj.weight"), {F, D}, f0, f1}}));
  TS_ASSIGN_OR_RETURN(layer->w_down, loader->LoadCols(name("down_proj.weight"), {D, F}, f0, f1));
  if (c.mlp_bias) {
    TS_ASSIGN_OR_RETURN(layer->b_gate_up, loader->LoadRows({{name("gate_proj.bias"), {F}, f0, f1},
                                                            {name("up_proj.bias"), {F}, f0, f1}}));
    TS_ASSIGN_OR_RETURN(layer->b_down, loader->Load(name("down_proj.bias"), {D}));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HybridModel>> HybridModel::Load(const std::string& dir,
                                                               Backend* backend,
                                                               Communicator* comm) {
  TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(dir));
  if (mc.arch != Architecture::kMamba2 && mc.arch != Architecture::kHybrid) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": architecture ", mc.architecture_name,
                                                   " is not a Mamba-2 or hybrid model"));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
  WeightLoader loader(ckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<HybridModel> model, Create(mc.hybrid, &loader, comm));
  TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
  return model;
}

KvCacheOptions HybridModel::KvOptions(int64_t num_blocks, int64_t block_size) const {
  KvCacheOptions o;
  o.num_layers = num_attention_layers();
  o.num_kv_heads = kv_heads_;
  o.head_dim = config_.attn.head_dim;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  return o;
}

Mamba2StateDims HybridModel::StateDims() const {
  Mamba2StateDims d;
  d.num_layers = config_.num_layers - num_attention_layers();
  d.conv_dim = conv_dim_;
  d.conv_kernel = config_.conv_kernel;
  d.heads = ssm_heads_;
  d.head_dim = config_.ssm_head_dim;
  d.state = config_.ssm_state;
  return d;
}

}  // namespace treespec
