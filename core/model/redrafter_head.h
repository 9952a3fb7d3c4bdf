// RedrafterHead: the recurrent draft head of ReDrafter (paper 003 Sec. 3.1),
// conditioned on the target's last hidden state, with the target's own token
// embedding, final norm and LM head.
//
//   h   = norm_target(f)                 f: the target's last layer output (the
//                                        residual stream ForwardOptions::hidden_layers
//                                        returns, before the final norm); h is the
//                                        last hidden state AFTER the final norm, as
//                                        Apple's ml-recurrent-drafter reads it
//   s_1 = e(y_0)                         y_0: the token the target produced from h
//   s_j = SiLU(U s_{j-1} + W e(y_{j-1}) + b)            j >= 2 (one RNN layer)
//   x   = [s_j ; h];  x = x + SiLU(A_k x + c_k)         k = 1..num_mlp_layers
//   logits_j = lm_head_target(P x)                      the distribution of y_j
//
// U, W, b, A_k, c_k and P live in the head's directory (model.safetensors:
// rnn_u.weight, rnn_w.weight, rnn_w.bias, mlp.K.weight, mlp.K.bias,
// proj.weight) with a config.json (model_type "redrafter"); the embedding,
// final norm and LM head are read from the target's checkpoint, never copied.
// The PyTorch reference is tools/train/redrafter.py.
//
// The head keeps no per-sequence state: callers hold s and h as host rows
// (a beam search keeps one s per candidate). Matrix products run on the
// backend; the SiLUs run on the host rows between them (the backend has no
// plain SiLU, and every step downloads its logits anyway).
//
// Thread-compatible: one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/backend.h"
#include "core/tensor/workspace.h"

namespace treespec {

struct RedrafterHeadInfo {
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int32_t num_mlp_layers = 0;
  // The draft length the head was trained for (config redrafter_train_length).
  int32_t train_length = 0;
  // The target layer whose output the head reads: the target's last.
  int32_t target_layer = 0;
  double norm_eps = 1e-6;  // the target's final norm
};

class RedrafterHead {
 public:
  // Loads the head in `head_dir` for the Llama target in `target_dir` (a
  // safetensors directory) on `backend` (not owned, must outlive the head).
  static absl::StatusOr<std::unique_ptr<RedrafterHead>> Load(const std::string& head_dir,
                                                             const std::string& target_dir,
                                                             Backend* backend);

  const RedrafterHeadInfo& info() const { return info_; }

  // in: features [n, H] the target's last layer outputs; out: h [n, H].
  absl::Status Context(const std::vector<float>& features, int64_t n, std::vector<float>* h);
  // in: tokens [n]; out: s [n, H] = e(tokens) (s_1 of each row).
  absl::Status InitState(const std::vector<int32_t>& tokens, std::vector<float>* s);
  // One RNN step. in: s [n, H], tokens [n] (y_{j-1} of each row);
  // out: next [n, H] = SiLU(U s + W e(tokens) + b). next may alias s.
  absl::Status Step(const std::vector<float>& s, const std::vector<int32_t>& tokens,
                    std::vector<float>* next);
  // in: s [n, H], h [n, H]; out: logits [n, V].
  absl::Status Logits(const std::vector<float>& s, const std::vector<float>& h,
                      std::vector<float>* logits);

 private:
  RedrafterHead() = default;
  absl::Status CheckTokens(const std::vector<int32_t>& tokens) const;
  absl::StatusOr<Tensor> Embed(const std::vector<int32_t>& tokens, int slot);

  RedrafterHeadInfo info_;
  Backend* backend_ = nullptr;
  Tensor embed_, lm_head_, norm_;     // the target's
  Tensor rnn_u_, rnn_w_, rnn_b_;      // [H, H], [H, H], [H]
  std::vector<Tensor> mlp_w_, mlp_b_; // [2H, 2H], [2H] each
  Tensor proj_;                       // [H, 2H]
  Workspace workspace_;
};

}  // namespace treespec
