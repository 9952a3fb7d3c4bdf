#include "core/model/redrafter_head.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/model/config.h"
#include "core/model/safetensors.h"
#include "core/model/weight_loader.h"
#include "core/util/json_fields.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr int32_t kMaxMlpLayers = 16;

absl::StatusOr<RedrafterHeadInfo> ParseHeadConfig(const std::string& head_dir,
                                                  const LlamaConfig& target) {
  const std::string path = head_dir + "/config.json";
  TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  JsonFields f(j, path);
  TS_ASSIGN_OR_RETURN(std::string type, f.String("model_type"));
  if (type != "redrafter") {
    return f.Error("model_type", absl::StrCat("'", type, "' is not redrafter"));
  }
  RedrafterHeadInfo info;
  TS_ASSIGN_OR_RETURN(info.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(info.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(int64_t mlp, f.Int("num_mlp_layers"));
  TS_ASSIGN_OR_RETURN(int64_t train_length, f.IntOr("redrafter_train_length", 4));
  TS_ASSIGN_OR_RETURN(int64_t layer, f.IntOr("redrafter_target_layer", target.num_layers - 1));
  if (info.hidden_size != target.hidden_size) {
    return f.Error("hidden_size", absl::StrCat(info.hidden_size, " differs from the target's ",
                                               target.hidden_size));
  }
  if (info.vocab_size != target.vocab_size) {
    return f.Error("vocab_size",
                   absl::StrCat(info.vocab_size, " differs from the target's ", target.vocab_size));
  }
  if (mlp < 0 || mlp > kMaxMlpLayers) {
    return f.Error("num_mlp_layers", absl::StrCat(mlp, " is outside [0, ", kMaxMlpLayers, "]"));
  }
  if (train_length < 1) {
    return f.Error("redrafter_train_length", absl::StrCat(train_length, " is not >= 1"));
  }
  if (layer != target.num_layers - 1) {
    return f.Error("redrafter_target_layer",
                   absl::StrCat(layer, " is not the target's last layer ", target.num_layers - 1));
  }
  info.num_mlp_layers = static_cast<int32_t>(mlp);
  info.train_length = static_cast<int32_t>(train_length);
  info.target_layer = static_cast<int32_t>(layer);
  info.norm_eps = target.rms_norm_eps;
  return info;
}

void SiluInPlace(std::vector<float>* x) {
  for (float& v : *x) v = v / (1.0f + std::exp(-v));
}

absl::Status CheckRows(const char* name, const std::vector<float>& x, int64_t n, int64_t width) {
  if (static_cast<int64_t>(x.size()) != n * width) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", x.size(), " floats for ", n, " rows of ", width));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedrafterHead>> RedrafterHead::Load(const std::string& head_dir,
                                                                   const std::string& target_dir,
                                                                   Backend* backend) {
  TS_ASSIGN_OR_RETURN(ModelConfig target, LoadModelConfig(target_dir));
  if (target.arch != Architecture::kLlama) {
    return absl::InvalidArgumentError(absl::StrCat(
        target_dir, ": a ReDrafter head needs a Llama-family target, not ",
        target.architecture_name));
  }
  auto head = std::unique_ptr<RedrafterHead>(new RedrafterHead());
  TS_ASSIGN_OR_RETURN(head->info_, ParseHeadConfig(head_dir, target.llama));
  head->backend_ = backend;
  head->workspace_.set_backend(backend);
  const int64_t H = head->info_.hidden_size, V = head->info_.vocab_size;

  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> tckpt, Checkpoint::Open(target_dir));
  WeightLoader tl(tckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(head->embed_, tl.Load("model.embed_tokens.weight", {V, H}));
  TS_ASSIGN_OR_RETURN(head->norm_, tl.LoadNorm("model.norm.weight", {H}));
  if (target.llama.tie_word_embeddings) {
    head->lm_head_ = head->embed_;
  } else {
    TS_ASSIGN_OR_RETURN(head->lm_head_, tl.Load("lm_head.weight", {V, H}));
  }

  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(head_dir));
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
    if (ckpt->tensors().count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(head_dir, ": holds '", name, "'; a head reads its target's, never a copy"));
    }
  }
  WeightLoader loader(ckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(head->rnn_u_, loader.Load("rnn_u.weight", {H, H}));
  TS_ASSIGN_OR_RETURN(head->rnn_w_, loader.Load("rnn_w.weight", {H, H}));
  TS_ASSIGN_OR_RETURN(head->rnn_b_, loader.Load("rnn_w.bias", {H}));
  for (int32_t k = 0; k < head->info_.num_mlp_layers; ++k) {
    TS_ASSIGN_OR_RETURN(Tensor w, loader.Load(absl::StrCat("mlp.", k, ".weight"), {2 * H, 2 * H}));
    TS_ASSIGN_OR_RETURN(Tensor b, loader.Load(absl::StrCat("mlp.", k, ".bias"), {2 * H}));
    head->mlp_w_.push_back(w);
    head->mlp_b_.push_back(b);
  }
  TS_ASSIGN_OR_RETURN(head->proj_, loader.Load("proj.weight", {H, 2 * H}));
  TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
  return head;
}

absl::Status RedrafterHead::CheckTokens(const std::vector<int32_t>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= info_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i],
                                                     " is outside the vocabulary [0, ",
                                                     info_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RedrafterHead::Embed(const std::vector<int32_t>& tokens, int slot) {
  TS_RETURN_IF_ERROR(CheckTokens(tokens));
  const int64_t n = static_cast<int64_t>(tokens.size());
  TS_ASSIGN_OR_RETURN(Tensor ids, backend_->Alloc(DType::kI32, {n}));
  TS_RETURN_IF_ERROR(backend_->Upload(tokens.data(), DType::kI32, &ids));
  TS_ASSIGN_OR_RETURN(Tensor e, workspace_.Get(slot, {n, info_.hidden_size}));
  TS_RETURN_IF_ERROR(backend_->Embedding(ids, embed_, &e));
  return e;
}

absl::Status RedrafterHead::Context(const std::vector<float>& features, int64_t n,
                                    std::vector<float>* h) {
  const int64_t H = info_.hidden_size;
  TS_RETURN_IF_ERROR(CheckRows("features", features, n, H));
  h->assign(n * H, 0.0f);
  if (n == 0) return absl::OkStatus();
  TS_ASSIGN_OR_RETURN(Tensor f, workspace_.Get(0, {n, H}));
  TS_RETURN_IF_ERROR(backend_->Upload(features.data(), DType::kF32, &f));
  TS_RETURN_IF_ERROR(backend_->RmsNorm(f, norm_, static_cast<float>(info_.norm_eps), &f));
  return backend_->DownloadF32(f, h->data());
}

absl::Status RedrafterHead::InitState(const std::vector<int32_t>& tokens, std::vector<float>* s) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  s->assign(n * info_.hidden_size, 0.0f);
  if (n == 0) return CheckTokens(tokens);
  TS_ASSIGN_OR_RETURN(Tensor e, Embed(tokens, 0));
  return backend_->DownloadF32(e, s->data());
}

absl::Status RedrafterHead::Step(const std::vector<float>& s, const std::vector<int32_t>& tokens,
                                 std::vector<float>* next) {
  const int64_t H = info_.hidden_size, n = static_cast<int64_t>(tokens.size());
  TS_RETURN_IF_ERROR(CheckRows("s", s, n, H));
  if (n == 0) {
    next->clear();
    return absl::OkStatus();
  }
  TS_ASSIGN_OR_RETURN(Tensor e, Embed(tokens, 0));
  TS_ASSIGN_OR_RETURN(Tensor st, workspace_.Get(1, {n, H}));
  TS_RETURN_IF_ERROR(backend_->Upload(s.data(), DType::kF32, &st));
  TS_ASSIGN_OR_RETURN(Tensor a, workspace_.Get(2, {n, H}));
  TS_ASSIGN_OR_RETURN(Tensor b, workspace_.Get(3, {n, H}));
  TS_RETURN_IF_ERROR(backend_->Linear(st, rnn_u_, &a));
  TS_RETURN_IF_ERROR(backend_->Linear(e, rnn_w_, &b));
  TS_RETURN_IF_ERROR(backend_->Add(a, b, &a));
  TS_RETURN_IF_ERROR(backend_->AddBias(&a, rnn_b_));
  next->assign(n * H, 0.0f);
  TS_RETURN_IF_ERROR(backend_->DownloadF32(a, next->data()));
  SiluInPlace(next);
  return absl::OkStatus();
}

absl::Status RedrafterHead::Logits(const std::vector<float>& s, const std::vector<float>& h,
                                   std::vector<float>* logits) {
  const int64_t H = info_.hidden_size, V = info_.vocab_size;
  const int64_t n = static_cast<int64_t>(s.size()) / H;
  TS_RETURN_IF_ERROR(CheckRows("s", s, n, H));
  TS_RETURN_IF_ERROR(CheckRows("h", h, n, H));
  logits->assign(n * V, 0.0f);
  if (n == 0) return absl::OkStatus();
  std::vector<float> x(n * 2 * H), t(n * 2 * H);
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(s.begin() + r * H, H, x.begin() + r * 2 * H);
    std::copy_n(h.begin() + r * H, H, x.begin() + r * 2 * H + H);
  }
  TS_ASSIGN_OR_RETURN(Tensor xt, workspace_.Get(4, {n, 2 * H}));
  TS_ASSIGN_OR_RETURN(Tensor tt, workspace_.Get(5, {n, 2 * H}));
  TS_RETURN_IF_ERROR(backend_->Upload(x.data(), DType::kF32, &xt));
  for (int32_t k = 0; k < info_.num_mlp_layers; ++k) {
    TS_RETURN_IF_ERROR(backend_->Linear(xt, mlp_w_[k], &tt));
    TS_RETURN_IF_ERROR(backend_->AddBias(&tt, mlp_b_[k]));
    TS_RETURN_IF_ERROR(backend_->DownloadF32(tt, t.data()));
    SiluInPlace(&t);
    TS_RETURN_IF_ERROR(backend_->Upload(t.data(), DType::kF32, &tt));
    TS_RETURN_IF_ERROR(backend_->Add(xt, tt, &xt));
  }
  TS_ASSIGN_OR_RETURN(Tensor z, workspace_.Get(6, {n, H}));
  TS_RETURN_IF_ERROR(backend_->Linear(xt, proj_, &z));
  TS_ASSIGN_OR_RETURN(Tensor out, workspace_.Get(7, {n, V}));
  TS_RETURN_IF_ERROR(backend_->Linear(z, lm_head_, &out));
  return backend_->DownloadF32(out, logits->data());
}

}  // namespace treespec
