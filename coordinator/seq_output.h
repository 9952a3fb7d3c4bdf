// SeqOutput: turns one sequence's committed tokens into the chunks its client
// receives — stop tokens and max_tokens (ApplyStops), incremental
// detokenization and stop strings — and writes the final chunk (finish
// reason, usage, timings, speculation statistics, the seed used).
//
// Thread-compatible: used by the lane thread that owns the sequence.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/spec/stop.h"
#include "core/tokenizer/tokenizer.h"
#include "coordinator/request.h"
#include "coordinator/step_record.h"

namespace treespec {

class SeqOutput {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokenizer` null: token ids only, no text.
  SeqOutput(std::shared_ptr<RequestState> req, const Tokenizer* tokenizer);

  // Streams `new_tokens` (committed by a step); returns how the sequence
  // finished (kNone: it goes on).
  FinishReason Emit(const std::vector<int32_t>& new_tokens);

  struct Times {
    Clock::time_point admitted, first_token, last_token;
  };
  // The last chunk; the caller then finishes the request with OK.
  void Final(FinishReason finish, const SpecTotals& totals, const Times& times);

  int32_t counted() const { return counted_; }

 private:
  std::shared_ptr<RequestState> req_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::optional<StopStringMatcher> stops_;
  int32_t counted_ = 0;  // completion tokens so far (usage)
};

}  // namespace treespec
