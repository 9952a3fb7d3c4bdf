// Llama-family models stored as GGUF (llama.cpp's converter output): the
// metadata becomes a ModelConfig, the tensors a Checkpoint under the Hugging
// Face names LlamaModel loads, dequantised at load.
//
// Two conventions differ from a Hugging Face checkpoint and are undone here:
//  * names: token_embd / blk.N.attn_q ... / output_norm / output (table in
//    gguf_model.cc);
//  * Q and K rows: convert_hf_to_gguf.py permutes each head's rows from the
//    half-split RoPE layout HF uses (pairs (i, i + d/2)) to ggml's adjacent
//    pairs (2i, 2i + 1): gguf row h·d + 2i + j holds HF row h·d + j·d/2 + i.
//    We apply the inverse, so LlamaModel's half-split RoPE sees HF rows. A
//    checkpoint written natively in the adjacent layout (llama2.c → GGUF, e.g.
//    stories260K.gguf) is then also right: inverting its interleave puts each
//    rotated pair at (i, i + d/2), which is what half-split RoPE rotates.
//
// Errors name the file and the key or tensor: INVALID_ARGUMENT (malformed or
// inconsistent), UNIMPLEMENTED (an architecture, rope scaling or feature we do
// not run), NOT_FOUND (a required key or tensor is absent).
// Thread-compatible.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/safetensors.h"
#include "core/tensor/backend.h"
#include "core/tensor/dtype.h"
#include "core/util/gguf.h"

namespace treespec {

// True if `path` names a GGUF file (by extension).
bool IsGgufPath(const std::string& path);

// general.architecture = llama and the llama.* keys → a Llama ModelConfig.
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The tensors of `file` under HF Llama names, Q/K un-permuted, dequantised to
// `dtype` (F32, F16 or BF16). Plain F32/F16/BF16 tensors already in `dtype`
// that need no permutation alias the mapping. With `keep_for`, a matrix whose
// stored type (F32, F16, BF16, Q8_0, Q4_0, Q4_1) that backend keeps as is
// (Backend::WeightDType) stays in it: quantised weights stay quantised.
absl::StatusOr<std::unique_ptr<Checkpoint>> GgufCheckpoint(
    const std::shared_ptr<const GgufFile>& file, const LlamaConfig& config,
    DType dtype = DType::kF32, const Backend* keep_for = nullptr);

// The HF name for a GGUF tensor name, or "" if it is not a llama tensor.
std::string GgufToHfName(const std::string& gguf_name);

// Inverse of convert_hf_to_gguf's permute() for `rows` = num_heads·head_dim
// rows of `cols` floats, in place.
void UnpermuteQK(float* data, int64_t num_heads, int64_t head_dim, int64_t cols);

struct GgufModel {
  std::shared_ptr<const GgufFile> file;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
};

// Opens `path`, parses the config and prepares the weights.
absl::StatusOr<GgufModel> OpenGgufModel(const std::string& path, DType dtype = DType::kF32,
                                        const Backend* keep_for = nullptr);

// OpenGgufModel + LlamaModel::Create on `backend` (matrices kept as stored
// where the backend's WeightDType keeps them, the rest dequantised to its
// activation dtype when that is F16 or BF16, else F32), rejecting unused
// tensors. `comm` may be null (single rank); rows are sharded as for HF
// checkpoints.
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadGgufLlamaModel(const std::string& path,
                                                               Backend* backend,
                                                               Communicator* comm = nullptr);

}  // namespace treespec
