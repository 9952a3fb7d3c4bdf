#include "core/model/sequence_model.h"

#include "absl/strings/str_cat.h"
#include "core/model/config.h"
#include "core/model/gguf_model.h"
#include "core/model/hybrid_sequence_model.h"
#include "core/model/llama_sequence_model.h"
#include "core/model/mamba_sequence_model.h"
#include "core/util/status_macros.h"

namespace treespec {

const char* ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMamba: return "mamba";
    case ModelKind::kMamba2: return "mamba2";
    case ModelKind::kHybrid: return "hybrid";
    case ModelKind::kLlama: break;
  }
  return "llama";
}

absl::StatusOr<SequenceSnapshot> SequenceModel::SnapshotState(int64_t) {
  return absl::UnimplementedError(absl::StrCat(ModelKindName(info().kind),
                                               ": no recurrent state to snapshot"));
}

absl::Status SequenceModel::RestoreState(int64_t, const SequenceSnapshot&) {
  return absl::UnimplementedError(absl::StrCat(ModelKindName(info().kind),
                                               ": no recurrent state to restore"));
}

absl::Status SequenceModel::CopyState(int64_t, int64_t) {
  return absl::UnimplementedError(absl::StrCat(ModelKindName(info().kind),
                                               ": no recurrent state to copy"));
}

absl::StatusOr<int64_t> SequenceModel::ForkPath(int64_t, const std::vector<int32_t>&, int64_t) {
  return absl::UnimplementedError(absl::StrCat(ModelKindName(info().kind), ": cannot fork"));
}

absl::Status SequenceModelOptions::Validate() const {
  if (kv_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_blocks ", kv_blocks, " must be >= 1"));
  }
  if (kv_block_size < 1 || kv_block_size > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("kv_block_size ", kv_block_size,
                                                   " must be in [1, 1024]"));
  }
  if (max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequences ", max_sequences, " must be >= 1"));
  }
  if (max_tail_nodes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tail_nodes ", max_tail_nodes,
                                                   " must be >= 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceModel>> LoadSequenceModel(
    const std::string& dir, Backend* backend, Communicator* comm,
    const SequenceModelOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (IsGgufPath(dir)) {
    TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LoadGgufLlamaModel(dir, backend, comm));
    TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaSequenceModel> m,
                        LlamaSequenceModel::Create(std::move(model), options.kv_blocks,
                                                   options.kv_block_size));
    return std::unique_ptr<SequenceModel>(std::move(m));
  }
  TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(dir));
  if (mc.arch == Architecture::kMamba) {
    if (comm != nullptr && comm->size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": a Mamba model cannot be tensor-parallel (tp size ", comm->size(), ")"));
    }
    TS_ASSIGN_OR_RETURN(std::unique_ptr<MambaModel> model, MambaModel::Load(dir, backend));
    model->SetUseGraphs(options.use_graphs);
    TS_ASSIGN_OR_RETURN(std::unique_ptr<MambaSequenceModel> m,
                        MambaSequenceModel::Create(std::move(model), options.max_sequences,
                                                   options.max_tail_nodes));
    return std::unique_ptr<SequenceModel>(std::move(m));
  }
  if (mc.arch == Architecture::kMamba2 || mc.arch == Architecture::kHybrid) {
    TS_ASSIGN_OR_RETURN(std::unique_ptr<HybridModel> model, HybridModel::Load(dir, backend, comm));
    TS_ASSIGN_OR_RETURN(std::unique_ptr<HybridSequenceModel> m,
                        HybridSequenceModel::Create(std::move(model), options));
    return std::unique_ptr<SequenceModel>(std::move(m));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::Load(dir, backend, comm));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaSequenceModel> m,
                      LlamaSequenceModel::Create(std::move(model), options.kv_blocks,
                                                 options.kv_block_size));
  return std::unique_ptr<SequenceModel>(std::move(m));
}

}  // namespace treespec
