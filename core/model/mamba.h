// MambaModel: Hugging Face MambaForCausalLM (Mamba-1: in_proj, depthwise causal
// conv, selective scan, gated output, RMSNorm residual blocks) on any Backend.
//
// Prefill runs the selective scan over a prompt from a slot's state; Step
// advances B slots by one token each (the batched recurrent decode used for
// tree drafting, paper 000 Sec. 4.1). States live in a MambaStatePool.
// Thread-compatible: one call at a time.
#pragma once

#include <map>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/model/ssm_state.h"
#include "core/model/weight_loader.h"
#include "core/tensor/backend.h"
#include "core/tensor/workspace.h"

namespace treespec {

class MambaModel {
 public:
  static absl::StatusOr<std::unique_ptr<MambaModel>> Create(const MambaConfig& config,
                                                            WeightLoader* loader);
  static absl::StatusOr<std::unique_ptr<MambaModel>> Load(const std::string& dir,
                                                          Backend* backend);

  const MambaConfig& config() const { return config_; }
  Backend* backend() const { return backend_; }

  // Feeds `tokens` to the state in `slot`. out: logits [L, V] when all_logits,
  // else [1, V] for the last token (host float32).
  absl::Status Prefill(const std::vector<int32_t>& tokens, int32_t slot, MambaStatePool* pool,
                       std::vector<float>* logits, bool all_logits = false);
  // One token per slot: tokens[i] advances slots[i]. out: logits [B, V].
  absl::Status Step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& slots,
                    MambaStatePool* pool, std::vector<float>* logits);

  // Graph mode for Step (paper 000 Sec. 4.1's graph cache): for each batch
  // size B the first step runs eagerly, then its device work is captured once
  // with fixed input (ids, slots) and output (logits) buffers; later steps of
  // size B upload into those buffers and replay the graph. A graph is tied to
  // the state tensors it was captured with and is recaptured for other ones.
  // On backends without graphs (UNIMPLEMENTED) Step stays eager. Off by default.
  void SetUseGraphs(bool use) { use_graphs_ = use; }
  bool use_graphs() const { return use_graphs_; }

 private:
  struct Layer {
    Tensor norm, in_proj, conv_w, conv_b, x_proj, dt_proj_w, dt_bias, A, D, out_proj;
  };
  // Activations of one pass over T rows (workspace views).
  struct Activations {
    Tensor x, h, xz, xs, z, xc, xdbl, dt, bm, cm, delta, y;
  };
  // The conv and scan of layer l: the only part that reads and writes the
  // recurrent state, which differs between a prompt (one sequence, L rows)
  // and a batched step (B sequences, one row each).
  using StateOp = std::function<absl::Status(size_t l, const Layer& w, Activations& a)>;

  MambaModel() = default;
  absl::StatusOr<Activations> MakeActivations(int64_t rows);
  // in: ids [T]; runs embedding and every layer; out: a.x [T, D].
  absl::Status RunLayers(const Tensor& ids, Activations& a, const StateOp& conv,
                         const StateOp& scan);
  absl::Status CheckTokens(const std::vector<int32_t>& tokens) const;
  // Shared tail: x [T, D] -> logits rows.
  absl::Status Head(const Tensor& x, std::vector<float>* logits);
  // Device part of the tail: x [T, D] -> logits [T, V] (a workspace view).
  absl::StatusOr<Tensor> HeadDevice(const Tensor& x);
  // Device part of Step. in: ids, slots [B] i32 on the device; out: logits [B, V].
  absl::StatusOr<Tensor> StepDevice(const Tensor& ids, const Tensor& slot_t, int64_t B,
                                    MambaStatePool* pool);
  absl::Status StepWithGraph(const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& slots, MambaStatePool* pool,
                             std::vector<float>* logits);

  struct StepGraph {
    std::vector<const void*> states;  // device addresses of the pool's tensors it uses
    Tensor ids, slots;                // [B] i32: inputs of the captured step
    Tensor logits;                    // [B, V]: its output
    std::vector<Tensor> pinned;       // workspace it reads and writes, kept alive
    int graph_id = -1;
  };

  MambaConfig config_;
  Backend* backend_ = nullptr;
  Tensor embed_, norm_f_, lm_head_;
  std::vector<Layer> layers_;
  Workspace workspace_;
  bool use_graphs_ = false;
  bool graphs_unavailable_ = false;
  std::map<int64_t, StepGraph> graphs_;  // by batch size
};

}  // namespace treespec
