#include "core/model/eagle_head.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/model/config.h"
#include "core/model/safetensors.h"
#include "core/model/weight_loader.h"
#include "core/util/json_fields.h"
#include "core/util/mapped_file.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr const char* kEmbed = "model.embed_tokens.weight";
constexpr const char* kLmHead = "lm_head.weight";

// Reads the EAGLE fields of the head's config.json against the target's config.
absl::StatusOr<EagleHeadInfo> ParseHeadConfig(const std::string& head_dir,
                                              const LlamaConfig& target) {
  const std::string path = head_dir + "/config.json";
  TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  JsonFields f(j, path);
  EagleHeadInfo info;
  TS_ASSIGN_OR_RETURN(std::string kind, f.String("eagle_kind"));
  if (kind == "eagle") {
    info.kind = EagleKind::kEagle;
  } else if (kind == "eagle3") {
    info.kind = EagleKind::kEagle3;
  } else {
    return f.Error("eagle_kind", absl::StrCat("'", kind, "' is not eagle or eagle3"));
  }
  TS_ASSIGN_OR_RETURN(info.hidden_size, f.Int("hidden_size"));
  TS_ASSIGN_OR_RETURN(info.vocab_size, f.Int("vocab_size"));
  TS_ASSIGN_OR_RETURN(int64_t layers, f.Int("num_hidden_layers"));
  if (layers != 1) return f.Error("num_hidden_layers", absl::StrCat(layers, " is not 1"));
  if (info.hidden_size != target.hidden_size) {
    return f.Error("hidden_size", absl::StrCat(info.hidden_size, " differs from the target's ",
                                               target.hidden_size));
  }
  if (info.vocab_size != target.vocab_size) {
    return f.Error("vocab_size",
                   absl::StrCat(info.vocab_size, " differs from the target's ", target.vocab_size));
  }
  if (!j.contains("eagle_target_layers") || !j["eagle_target_layers"].is_array()) {
    return f.Error("eagle_target_layers", "is missing or not an array");
  }
  for (const auto& v : j["eagle_target_layers"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= target.num_layers) {
      return f.Error(
          "eagle_target_layers",
          absl::StrCat("holds ", JsonExcerpt(v), ", not a layer of the target's ", target.num_layers));
    }
    info.target_layers.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  const size_t want = info.kind == EagleKind::kEagle ? 1 : 3;
  if (info.target_layers.size() != want) {
    return f.Error("eagle_target_layers", absl::StrCat("has ", info.target_layers.size(),
                                                       " layers; ", kind, " reads ", want));
  }
  return info;
}

// The head's own tensors plus the target's embedding and LM head, as one
// checkpoint the Llama loader reads. The head must not carry the target's.
absl::StatusOr<std::unique_ptr<Checkpoint>> MergedCheckpoint(const std::string& head_dir,
                                                             const std::string& target_dir,
                                                             bool tied) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> head, Checkpoint::Open(head_dir));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> target, Checkpoint::Open(target_dir));
  std::map<std::string, TensorInfo> tensors = head->tensors();
  for (const char* name : {kEmbed, kLmHead}) {
    if (tensors.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(head_dir, ": holds '", name, "'; a head reads its target's, never a copy"));
    }
    if (tied && std::string(name) == kLmHead) continue;
    auto it = target->tensors().find(name);
    if (it == target->tensors().end()) {
      return absl::NotFoundError(absl::StrCat(target_dir, ": no tensor '", name, "'"));
    }
    tensors[name] = it->second;  // keeps the target's mapping alive
  }
  return Checkpoint::FromTensors(absl::StrCat(head_dir, " + ", target_dir), std::move(tensors));
}

}  // namespace

const char* EagleKindName(EagleKind kind) {
  return kind == EagleKind::kEagle3 ? "eagle3" : "eagle";
}

absl::StatusOr<std::unique_ptr<EagleHead>> EagleHead::Load(const std::string& head_dir,
                                                           const std::string& target_dir,
                                                           Backend* backend, int64_t kv_blocks,
                                                           int64_t kv_block_size) {
  TS_ASSIGN_OR_RETURN(ModelConfig target, LoadModelConfig(target_dir));
  if (target.arch != Architecture::kLlama) {
    return absl::InvalidArgumentError(absl::StrCat(
        target_dir, ": an EAGLE head needs a Llama-family target, not ", target.architecture_name));
  }
  auto head = std::unique_ptr<EagleHead>(new EagleHead());
  TS_ASSIGN_OR_RETURN(head->info_, ParseHeadConfig(head_dir, target.llama));
  head->backend_ = backend;
  head->workspace_.set_backend(backend);
  LlamaConfig layer = target.llama;
  layer.num_layers = 1;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt,
                      MergedCheckpoint(head_dir, target_dir, layer.tie_word_embeddings));
  WeightLoader loader(ckpt.get(), backend);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                      LlamaModel::Create(layer, &loader, nullptr));
  const int64_t H = head->info_.hidden_size;
  TS_ASSIGN_OR_RETURN(head->fc_feature_, loader.LoadCols("fc.weight", {H, 2 * H}, 0, H));
  TS_ASSIGN_OR_RETURN(head->fc_token_, loader.LoadCols("fc.weight", {H, 2 * H}, H, 2 * H));
  if (head->info_.kind == EagleKind::kEagle3) {
    TS_ASSIGN_OR_RETURN(head->fuse_, loader.Load("fuse.weight", {H, head->info_.feature_width()}));
  }
  TS_RETURN_IF_ERROR(ckpt->CheckAllUsed());
  TS_ASSIGN_OR_RETURN(head->seqs_,
                      LlamaSequenceModel::Create(std::move(model), kv_blocks, kv_block_size));
  return head;
}

absl::Status EagleHead::Fuse(const std::vector<float>& features, int64_t n, std::vector<float>* g) {
  const int64_t H = info_.hidden_size, W = info_.feature_width();
  if (static_cast<int64_t>(features.size()) != n * W) {
    return absl::InvalidArgumentError(
        absl::StrCat("features: ", features.size(), " floats for ", n, " rows of ", W));
  }
  if (info_.kind == EagleKind::kEagle || n == 0) {
    *g = features;
    return absl::OkStatus();
  }
  TS_ASSIGN_OR_RETURN(Tensor f, workspace_.Get(0, {n, W}));
  TS_RETURN_IF_ERROR(backend_->Upload(features.data(), DType::kF32, &f));
  TS_ASSIGN_OR_RETURN(Tensor out, workspace_.Get(1, {n, H}));
  TS_RETURN_IF_ERROR(backend_->Linear(f, fuse_, &out));
  g->assign(n * H, 0.0f);
  return backend_->DownloadF32(out, g->data());
}

absl::Status EagleHead::Forward(const std::vector<ForwardSeq>& seqs, const std::vector<float>& g,
                                ForwardOutput* out) {
  const int64_t H = info_.hidden_size, V = info_.vocab_size;
  std::vector<int32_t> tokens;
  for (const ForwardSeq& s : seqs) tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(g.size()) != T * H) {
    return absl::InvalidArgumentError(
        absl::StrCat("g: ", g.size(), " floats for ", T, " rows of ", H));
  }
  for (int64_t i = 0; i < T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[i], " is outside the vocabulary [0, ", V, ")"));
    }
  }
  ForwardOptions options;
  options.hidden_layers = {0};
  Tensor x;
  if (T > 0) {
    TS_ASSIGN_OR_RETURN(Tensor ids, backend_->Alloc(DType::kI32, {T}));
    TS_RETURN_IF_ERROR(backend_->Upload(tokens.data(), DType::kI32, &ids));
    TS_ASSIGN_OR_RETURN(Tensor gt, workspace_.Get(0, {T, H}));
    TS_RETURN_IF_ERROR(backend_->Upload(g.data(), DType::kF32, &gt));
    TS_ASSIGN_OR_RETURN(Tensor emb, workspace_.Get(1, {T, H}));
    TS_RETURN_IF_ERROR(backend_->Embedding(ids, seqs_->model()->embedding(), &emb));
    TS_ASSIGN_OR_RETURN(x, workspace_.Get(2, {T, H}));
    TS_ASSIGN_OR_RETURN(Tensor xe, workspace_.Get(3, {T, H}));
    TS_RETURN_IF_ERROR(backend_->Linear(gt, fc_feature_, &x));
    TS_RETURN_IF_ERROR(backend_->Linear(emb, fc_token_, &xe));
    TS_RETURN_IF_ERROR(backend_->Add(x, xe, &x));
    options.input_rows = &x;
  }
  return seqs_->Forward(seqs, out, options);
}

}  // namespace treespec
