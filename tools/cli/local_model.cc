#include "tools/cli/local_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/spec/philox.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<LocalModel>> LocalModel::Load(const std::string& dir,
                                                             const std::string& device,
                                                             int64_t max_batch, int64_t max_len) {
  auto m = std::unique_ptr<LocalModel>(new LocalModel());
  TS_ASSIGN_OR_RETURN(m->config_, LoadModelConfig(dir));
  TS_ASSIGN_OR_RETURN(m->backend_, CreateBackend(device));
  m->max_len_ = max_len;
  SequenceModelOptions o;
  o.kv_block_size = 16;
  o.kv_blocks = std::max<int64_t>(1, max_batch * ((max_len + o.kv_block_size - 1) / o.kv_block_size));
  o.max_sequences = std::max<int64_t>(1, max_batch);
  o.max_tail_nodes = 1;
  TS_ASSIGN_OR_RETURN(m->model_, LoadSequenceModel(dir, m->backend_.get(), nullptr, o));
  return m;
}

absl::Status LocalModel::Reset(size_t n) {
  for (int64_t h : handles_) model_->Release(h);
  handles_.clear();
  for (size_t i = 0; i < n; ++i) {
    TS_ASSIGN_OR_RETURN(int64_t h, model_->Open(max_len_));
    handles_.push_back(h);
  }
  return absl::OkStatus();
}

absl::Status LocalModel::Feed(const std::vector<size_t>& which,
                              const std::vector<std::vector<int32_t>>& tokens,
                              std::vector<float>* logits) {
  std::vector<ForwardSeq> batch;
  for (size_t k = 0; k < which.size(); ++k) {
    if (model_->length(handles_[which[k]]) + static_cast<int64_t>(tokens[k].size()) > max_len_) {
      return absl::OutOfRangeError(absl::StrCat("sequence longer than --max_len ", max_len_));
    }
    batch.push_back({handles_[which[k]], tokens[k], {}, LogitsMode::kLast});
  }
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(model_->Forward(batch, &fo));
  for (size_t k = 0; k < which.size(); ++k) {
    TS_RETURN_IF_ERROR(model_->Commit(handles_[which[k]], static_cast<int64_t>(tokens[k].size())));
  }
  *logits = std::move(fo.logits);
  return absl::OkStatus();
}

absl::Status LocalModel::AllLogits(const std::vector<int32_t>& prompt, std::vector<float>* logits) {
  TS_RETURN_IF_ERROR(Reset(1));
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(model_->Forward({{handles_[0], prompt, {}, LogitsMode::kAll}}, &fo));
  *logits = std::move(fo.logits);
  return absl::OkStatus();
}

absl::Status LocalModel::Generate(const std::vector<std::vector<int32_t>>& prompts,
                                  const SamplingParams& params, const std::vector<uint64_t>& seeds,
                                  int64_t max_new, const std::vector<int32_t>& stop_ids,
                                  const std::function<void(size_t, int32_t)>& on_token) {
  const int64_t V = vocab_size();
  TS_RETURN_IF_ERROR(Reset(prompts.size()));
  std::vector<size_t> live;
  for (size_t i = 0; i < prompts.size(); ++i) live.push_back(i);
  std::vector<std::vector<int32_t>> chunk = prompts;
  std::vector<int64_t> position(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) position[i] = static_cast<int64_t>(prompts[i].size());
  std::vector<float> probs;
  for (int64_t n = 0; n < max_new && !live.empty(); ++n) {
    std::vector<float> logits;
    TS_RETURN_IF_ERROR(Feed(live, chunk, &logits));
    std::vector<size_t> next_live;
    std::vector<std::vector<int32_t>> next_chunk;
    for (size_t k = 0; k < live.size(); ++k) {
      const size_t i = live[k];
      const float* row = logits.data() + k * V;
      int32_t tok;
      if (params.greedy()) {
        tok = Argmax(row, V);
      } else {
        ProcessLogits(row, V, params, &probs);
        tok = SampleDense(probs, Uniform({seeds[i], RngStream::kSample,
                                          static_cast<uint32_t>(position[i]), 0},
                                         0));
      }
      on_token(i, tok);
      position[i] += 1;
      bool stop = false;
      for (int32_t s : stop_ids) stop |= s == tok;
      if (!stop && position[i] < max_len_) {
        next_live.push_back(i);
        next_chunk.push_back({tok});
      }
    }
    live = std::move(next_live);
    chunk = std::move(next_chunk);
  }
  return absl::OkStatus();
}

}  // namespace treespec
