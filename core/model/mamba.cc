#include "core/model/mamba.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

std::string L(int64_t i, const char* suffix) {
  return absl::StrCat("backbone.layers.", i, ".", suffix);
}

// Loads a small parameter as host float32 (random mode: `fallback(i)`).
absl::StatusOr<std::vector<float>> HostF32(WeightLoader* loader, const std::string& name,
                                           const Shape& shape, float (*fallback)(int64_t, int64_t),
                                           int64_t inner) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  if (loader->is_random()) {
    for (int64_t i = 0; i < n; ++i) v[i] = fallback(i / inner, i % inner);
    return v;
  }
  TS_ASSIGN_OR_RETURN(const TensorInfo* info, loader->checkpoint()->Find(name, shape));
  ConvertToF32(info->data, info->dtype, n, v.data());
  return v;
}

absl::StatusOr<Tensor> UploadF32(Backend* be, const std::vector<float>& v, Shape shape) {
  TS_ASSIGN_OR_RETURN(Tensor t, be->Alloc(DType::kF32, std::move(shape)));
  TS_RETURN_IF_ERROR(be->Upload(v.data(), DType::kF32, &t));
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MambaModel>> MambaModel::Create(const MambaConfig& config,
                                                               WeightLoader* loader) {
  auto m = std::unique_ptr<MambaModel>(new MambaModel());
  m->config_ = config;
  Backend* be = loader->backend();
  m->backend_ = be;
  m->workspace_.set_backend(be);
  const int64_t V = config.vocab_size, D = config.hidden_size, C = config.intermediate_size;
  const int64_t N = config.state_size, R = config.time_step_rank, K = config.conv_kernel;
  TS_ASSIGN_OR_RETURN(m->embed_, loader->Load("backbone.embeddings.weight", {V, D}));
  TS_ASSIGN_OR_RETURN(m->norm_f_, loader->LoadNorm("backbone.norm_f.weight", {D}));
  Checkpoint* ckpt = loader->checkpoint();
  if (config.tie_word_embeddings) {
    if (ckpt != nullptr) ckpt->Ignore("lm_head.weight");
    m->lm_head_ = m->embed_;
  } else {
    TS_ASSIGN_OR_RETURN(m->lm_head_, loader->Load("lm_head.weight", {V, D}));
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    Layer w;
    TS_ASSIGN_OR_RETURN(w.norm, loader->LoadNorm(L(i, "norm.weight"), {D}));
    TS_ASSIGN_OR_RETURN(w.in_proj, loader->Load(L(i, "mixer.in_proj.weight"), {2 * C, D}));
    TS_ASSIGN_OR_RETURN(Tensor conv3, loader->Load(L(i, "mixer.conv1d.weight"), {C, 1, K}));
    w.conv_w = conv3.Reshape({C, K});
    if (config.use_conv_bias) {
      TS_ASSIGN_OR_RETURN(w.conv_b, loader->Load(L(i, "mixer.conv1d.bias"), {C}));
    } else {
      TS_ASSIGN_OR_RETURN(w.conv_b, be->Alloc(be->activation_dtype(), {C}));
    }
    TS_ASSIGN_OR_RETURN(w.x_proj, loader->Load(L(i, "mixer.x_proj.weight"), {R + 2 * N, C}));
    TS_ASSIGN_OR_RETURN(w.dt_proj_w, loader->Load(L(i, "mixer.dt_proj.weight"), {C, R}));
    TS_ASSIGN_OR_RETURN(
        std::vector<float> dt_bias,
        HostF32(loader, L(i, "mixer.dt_proj.bias"), {C}, [](int64_t, int64_t) { return -4.0f; }, 1));
    TS_ASSIGN_OR_RETURN(w.dt_bias, UploadF32(be, dt_bias, {C}));
    TS_ASSIGN_OR_RETURN(std::vector<float> a_log,
                        HostF32(loader, L(i, "mixer.A_log"), {C, N},
                                [](int64_t, int64_t n) { return std::log(static_cast<float>(n + 1)); },
                                N));
    for (float& a : a_log) a = -std::exp(a);
    TS_ASSIGN_OR_RETURN(w.A, UploadF32(be, a_log, {C, N}));
    TS_ASSIGN_OR_RETURN(std::vector<float> d,
                        HostF32(loader, L(i, "mixer.D"), {C}, [](int64_t, int64_t) { return 1.0f; }, 1));
    TS_ASSIGN_OR_RETURN(w.D, UploadF32(be, d, {C}));
    TS_ASSIGN_OR_RETURN(w.out_proj, loader->Load(L(i, "mixer.out_proj.weight"), {D, C}));
    m->layers_.push_back(std::move(w));
  }
  return m;
}

absl::StatusOr<std::unique_ptr<MambaModel>> MambaModel::Load(const std::string& dir,
                                                             Backend* backend) {
  TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(dir));
  if (mc.arch != Architecture::kMamba) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": architecture ", mc.architecture_name, " is not a Mamba model"));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
  WeightLoader loader(ckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<MambaModel> model, Create(mc.mamba, &loader));
  TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
  return model;
}

absl::StatusOr<MambaModel::Activations> MambaModel::MakeActivations(int64_t T) {
  const int64_t D = config_.hidden_size, C = config_.intermediate_size;
  const int64_t N = config_.state_size, R = config_.time_step_rank;
  Activations a;
  TS_ASSIGN_OR_RETURN(a.x, workspace_.Get(0, {T, D}));
  TS_ASSIGN_OR_RETURN(a.h, workspace_.Get(1, {T, D}));
  TS_ASSIGN_OR_RETURN(a.xz, workspace_.Get(2, {T, 2 * C}));
  TS_ASSIGN_OR_RETURN(a.xs, workspace_.Get(3, {T, C}));
  TS_ASSIGN_OR_RETURN(a.z, workspace_.Get(4, {T, C}));
  TS_ASSIGN_OR_RETURN(a.xc, workspace_.Get(5, {T, C}));
  TS_ASSIGN_OR_RETURN(a.xdbl, workspace_.Get(6, {T, R + 2 * N}));
  TS_ASSIGN_OR_RETURN(a.dt, workspace_.Get(7, {T, R}));
  TS_ASSIGN_OR_RETURN(a.bm, workspace_.Get(8, {T, N}));
  TS_ASSIGN_OR_RETURN(a.cm, workspace_.Get(9, {T, N}));
  TS_ASSIGN_OR_RETURN(a.delta, workspace_.Get(10, {T, C}));
  TS_ASSIGN_OR_RETURN(a.y, workspace_.Get(11, {T, C}));
  return a;
}

absl::Status MambaModel::RunLayers(const Tensor& ids, Activations& a, const StateOp& conv,
                                   const StateOp& scan) {
  Backend* be = backend_;
  const int64_t C = config_.intermediate_size, N = config_.state_size;
  const int64_t R = config_.time_step_rank;
  const float eps = static_cast<float>(config_.layer_norm_epsilon);
  TS_RETURN_IF_ERROR(be->Embedding(ids, embed_, &a.x));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    TS_RETURN_IF_ERROR(be->RmsNorm(a.x, w.norm, eps, &a.h));
    TS_RETURN_IF_ERROR(be->Linear(a.h, w.in_proj, &a.xz));
    TS_RETURN_IF_ERROR(be->SliceCols(a.xz, 0, &a.xs));
    TS_RETURN_IF_ERROR(be->SliceCols(a.xz, C, &a.z));
    TS_RETURN_IF_ERROR(conv(l, w, a));
    TS_RETURN_IF_ERROR(be->Linear(a.xc, w.x_proj, &a.xdbl));
    TS_RETURN_IF_ERROR(be->SliceCols(a.xdbl, 0, &a.dt));
    TS_RETURN_IF_ERROR(be->SliceCols(a.xdbl, R, &a.bm));
    TS_RETURN_IF_ERROR(be->SliceCols(a.xdbl, R + N, &a.cm));
    TS_RETURN_IF_ERROR(be->Linear(a.dt, w.dt_proj_w, &a.delta));
    TS_RETURN_IF_ERROR(scan(l, w, a));
    TS_RETURN_IF_ERROR(be->Linear(a.y, w.out_proj, &a.h));
    TS_RETURN_IF_ERROR(be->Add(a.x, a.h, &a.x));
  }
  return absl::OkStatus();
}

absl::Status MambaModel::CheckTokens(const std::vector<int32_t>& tokens) const {
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MambaModel::HeadDevice(const Tensor& x) {
  const int64_t T = x.dim(0), D = config_.hidden_size, V = config_.vocab_size;
  TS_ASSIGN_OR_RETURN(Tensor h, workspace_.Get(20, {T, D}));
  TS_RETURN_IF_ERROR(backend_->RmsNorm(x, norm_f_, static_cast<float>(config_.layer_norm_epsilon), &h));
  TS_ASSIGN_OR_RETURN(Tensor out, workspace_.Get(21, {T, V}));
  TS_RETURN_IF_ERROR(backend_->Linear(h, lm_head_, &out));
  return out;
}

absl::Status MambaModel::Head(const Tensor& x, std::vector<float>* logits) {
  TS_ASSIGN_OR_RETURN(Tensor out, HeadDevice(x));
  logits->resize(out.numel());
  return backend_->DownloadF32(out, logits->data());
}

absl::Status MambaModel::Prefill(const std::vector<int32_t>& tokens, int32_t slot,
                                 MambaStatePool* pool, std::vector<float>* logits,
                                 bool all_logits) {
  TS_RETURN_IF_ERROR(CheckTokens(tokens));
  if (tokens.empty()) return absl::InvalidArgumentError("mamba prefill: no tokens");
  if (slot < 0 || slot >= pool->num_slots()) {
    return absl::InvalidArgumentError(absl::StrCat("mamba prefill: bad slot ", slot));
  }
  Backend* be = backend_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t D = config_.hidden_size, C = config_.intermediate_size;
  const int64_t N = config_.state_size;
  TS_ASSIGN_OR_RETURN(Tensor ids, be->Alloc(DType::kI32, {T}));
  TS_RETURN_IF_ERROR(be->Upload(tokens.data(), DType::kI32, &ids));
  TS_ASSIGN_OR_RETURN(Activations a, MakeActivations(T));
  TS_RETURN_IF_ERROR(RunLayers(
      ids, a,
      [&](size_t l, const Layer& w, Activations& act) {
        Tensor st = pool->conv(l)->Rows(slot, slot + 1).Reshape({C, config_.conv_kernel});
        return be->MambaConv(act.xs, w.conv_w, w.conv_b, &st, &act.xc);
      },
      [&](size_t l, const Layer& w, Activations& act) {
        Tensor st = pool->ssm(l)->Rows(slot, slot + 1).Reshape({C, N});
        return be->MambaScan(act.xc, act.delta, w.dt_bias, w.A, act.bm, act.cm, w.D, act.z, &st,
                             &act.y);
      }));
  const Tensor& x = a.x;
  if (all_logits) return Head(x, logits);
  TS_ASSIGN_OR_RETURN(Tensor last, workspace_.Get(12, {1, D}));
  TS_RETURN_IF_ERROR(be->GatherRows(x, {static_cast<int32_t>(T - 1)}, &last));
  return Head(last, logits);
}

absl::Status MambaModel::Step(const std::vector<int32_t>& tokens,
                              const std::vector<int32_t>& slots, MambaStatePool* pool,
                              std::vector<float>* logits) {
  TS_RETURN_IF_ERROR(CheckTokens(tokens));
  if (tokens.size() != slots.size()) {
    return absl::InvalidArgumentError("mamba step: tokens and slots differ in length");
  }
  for (int32_t s : slots) {
    if (s < 0 || s >= pool->num_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("mamba step: bad slot ", s));
    }
  }
  Backend* be = backend_;
  const int64_t B = static_cast<int64_t>(tokens.size());
  if (B == 0) {
    logits->clear();
    return absl::OkStatus();
  }
  if (use_graphs_ && !graphs_unavailable_) return StepWithGraph(tokens, slots, pool, logits);
  TS_ASSIGN_OR_RETURN(Tensor ids, be->Alloc(DType::kI32, {B}));
  TS_RETURN_IF_ERROR(be->Upload(tokens.data(), DType::kI32, &ids));
  TS_ASSIGN_OR_RETURN(Tensor slot_t, be->Alloc(DType::kI32, {B}));
  TS_RETURN_IF_ERROR(be->Upload(slots.data(), DType::kI32, &slot_t));
  TS_ASSIGN_OR_RETURN(Tensor out, StepDevice(ids, slot_t, B, pool));
  logits->resize(out.numel());
  return be->DownloadF32(out, logits->data());
}

absl::StatusOr<Tensor> MambaModel::StepDevice(const Tensor& ids, const Tensor& slot_t, int64_t B,
                                              MambaStatePool* pool) {
  Backend* be = backend_;
  TS_ASSIGN_OR_RETURN(Activations a, MakeActivations(B));
  TS_RETURN_IF_ERROR(RunLayers(
      ids, a,
      [&](size_t l, const Layer& w, Activations& act) {
        return be->MambaConvBatch(act.xs, w.conv_w, w.conv_b, slot_t, pool->conv(l), &act.xc);
      },
      [&](size_t l, const Layer& w, Activations& act) {
        return be->MambaScanBatch(act.xc, act.delta, w.dt_bias, w.A, act.bm, act.cm, w.D, act.z,
                                  slot_t, pool->ssm(l), &act.y);
      }));
  return HeadDevice(a.x);
}

absl::Status MambaModel::StepWithGraph(const std::vector<int32_t>& tokens,
                                       const std::vector<int32_t>& slots, MambaStatePool* pool,
                                       std::vector<float>* logits) {
  Backend* be = backend_;
  const int64_t B = static_cast<int64_t>(tokens.size());
  std::vector<const void*> states;
  for (size_t l = 0; l < layers_.size(); ++l) {
    states.push_back(pool->conv(l)->raw());
    states.push_back(pool->ssm(l)->raw());
  }
  auto it = graphs_.find(B);
  if (it != graphs_.end() && it->second.states == states) {
    StepGraph& g = it->second;
    TS_RETURN_IF_ERROR(be->Upload(tokens.data(), DType::kI32, &g.ids));
    TS_RETURN_IF_ERROR(be->Upload(slots.data(), DType::kI32, &g.slots));
    TS_RETURN_IF_ERROR(be->ReplayGraph(g.graph_id));
    logits->resize(g.logits.numel());
    return be->DownloadF32(g.logits, logits->data());
  }
  // First step of this size (or with other state tensors): run it eagerly,
  // which also sizes the workspace, so that the capture allocates nothing.
  StepGraph g;
  g.states = std::move(states);
  TS_ASSIGN_OR_RETURN(g.ids, be->Alloc(DType::kI32, {B}));
  TS_RETURN_IF_ERROR(be->Upload(tokens.data(), DType::kI32, &g.ids));
  TS_ASSIGN_OR_RETURN(g.slots, be->Alloc(DType::kI32, {B}));
  TS_RETURN_IF_ERROR(be->Upload(slots.data(), DType::kI32, &g.slots));
  TS_ASSIGN_OR_RETURN(Tensor out, StepDevice(g.ids, g.slots, B, pool));
  logits->resize(out.numel());
  TS_RETURN_IF_ERROR(be->DownloadF32(out, logits->data()));
  absl::StatusOr<int> id = be->CaptureGraph([&]() -> absl::Status {
    TS_ASSIGN_OR_RETURN(g.logits, StepDevice(g.ids, g.slots, B, pool));
    return absl::OkStatus();
  });
  if (absl::IsUnimplemented(id.status())) {
    graphs_unavailable_ = true;
    return absl::OkStatus();
  }
  TS_RETURN_IF_ERROR(id.status());
  g.graph_id = *id;
  g.pinned = workspace_.buffers();
  graphs_[B] = std::move(g);
  return absl::OkStatus();
}

}  // namespace treespec
