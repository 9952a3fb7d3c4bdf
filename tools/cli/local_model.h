// LocalModel: in-process autoregressive generation over any supported
// architecture (a SequenceModel from LoadSequenceModel), batched over many
// sequences. Used by treespec-generate,
// treespec-logits and the corpus generator. Not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/model/sequence_model.h"
#include "core/spec/sampling.h"
#include "core/tensor/backend.h"

namespace treespec {

class LocalModel {
 public:
  static absl::StatusOr<std::unique_ptr<LocalModel>> Load(const std::string& dir,
                                                          const std::string& device,
                                                          int64_t max_batch, int64_t max_len);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size(); }

  // out: logits [prompt.size(), V] for every prompt position (one sequence).
  absl::Status AllLogits(const std::vector<int32_t>& prompt, std::vector<float>* logits);

  // Generates up to `max_new` tokens after each prompt (batched). Sampling
  // uses Philox keyed by (seeds[i], position). `on_token(i, token)` is called
  // as tokens are produced; a sequence stops at an EOS id in `stop_ids`.
  absl::Status Generate(const std::vector<std::vector<int32_t>>& prompts,
                        const SamplingParams& params, const std::vector<uint64_t>& seeds,
                        int64_t max_new, const std::vector<int32_t>& stop_ids,
                        const std::function<void(size_t, int32_t)>& on_token);

 private:
  // Feeds one chunk per sequence (prompts or single tokens); returns the last
  // logits of each [n, V].
  absl::Status Feed(const std::vector<size_t>& which,
                    const std::vector<std::vector<int32_t>>& tokens, std::vector<float>* logits);
  absl::Status Reset(size_t n);

  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SequenceModel> model_;
  int64_t max_len_ = 0;
  std::vector<int64_t> handles_;  // model handle per batch entry
};

}  // namespace treespec
