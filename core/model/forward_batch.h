// Inputs and outputs of one packed forward pass over many sequences.
//
// Each ForwardSeq appends new tokens after the committed KV of its sequence:
// a prompt chunk or decode token (parents empty: a chain), or a packed token
// tree (parents[i] < i is node i's parent, -1 for the root). Tree nodes get
// position length + depth and attend their ancestors only.
//
// A tree may also be grown over several calls (a drafter adding one level at a
// time): num_prior nodes were written by earlier calls right after the
// committed length; `parents` then covers all num_prior + tokens.size() nodes
// (prior nodes first) and the new tokens are nodes num_prior, num_prior+1, ...
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/spec/sampling.h"

namespace treespec {

class Tensor;

enum class LogitsMode { kNone, kLast, kAll };

struct ForwardSeq {
  int64_t kv_seq = 0;  // the sequence's handle (SequenceModel::Open)
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;  // empty: chain; else [num_prior + tokens.size()]
  LogitsMode logits = LogitsMode::kLast;
  int32_t num_prior = 0;
  // The hidden states of ForwardOptions::hidden_layers for every new token
  // (a prompt whose drafter reads features), not only for the logits rows:
  // a feature row costs a copy, a logits row the LM head.
  bool hidden_all = false;
};

struct ForwardOptions {
  // Hidden states to return for every logits row (every new token of a
  // ForwardSeq with hidden_all), by layer index in [0, num_layers): the
  // residual stream after that layer, before the final norm. out->hidden is
  // [layers.size(), hidden rows, hidden_size] in this order.
  std::vector<int32_t> hidden_layers;
  // Return only each logits row's argmax (out->argmax, lowest id among equal
  // maxima), computed on the device where the backend can; out->logits stays
  // empty. For greedy verification, which needs nothing else.
  bool argmax_only = false;
  // When set, the rows entering the first layer, [total new tokens, hidden] in
  // the packed order of `seqs`, instead of the token embeddings (an EAGLE head
  // computes its own inputs, core/model/eagle_head.h). Token ids are still
  // checked and set the positions; LlamaModel only.
  const Tensor* input_rows = nullptr;
  // Empty, or one entry per ForwardSeq: the sampling of the sequences whose
  // rows the caller reads as processed distributions (ProcessLogits; entries
  // with temperature 0 read none). A model that can keeps the logits on the
  // device, turns those rows into probabilities there
  // (Backend::ProcessLogitsRows), fills out->argmax for every row and
  // out->fetch_probs, and leaves out->logits empty, so that only the rows the
  // caller fetches leave the device (sampled verification reads one row per
  // node of the accepted path, not the whole tree). Other models (tensor
  // parallel, Mamba) ignore it and return out->logits as usual.
  std::vector<SamplingParams> row_sampling;
};

struct ForwardOutput {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::vector<float> logits;         // [num_rows, vocab]
  std::vector<float> hidden;         // [layers asked for, hidden rows, hidden] (ForwardOptions)
  // [S + 1]: hidden rows of sequence s are [hidden_row_start[s], hidden_row_start[s+1]); the
  // same as row_start unless a ForwardSeq asked for hidden_all.
  std::vector<int32_t> hidden_row_start;
  std::vector<int32_t> argmax;       // [num_rows] with ForwardOptions::argmax_only
  std::vector<int32_t> row_start;    // [S + 1]: rows of sequence s are [row_start[s], row_start[s+1])
  // With ForwardOptions::row_sampling where the model honours it: copies the
  // processed distribution of `row` (a row of a sampled sequence) to the
  // host. out: probs [vocab]. Valid until the model's next call.
  std::function<absl::Status(int64_t row, float* probs)> fetch_probs;
  const float* row_logits(int64_t row) const { return logits.data() + row * vocab_size; }
};

}  // namespace treespec
