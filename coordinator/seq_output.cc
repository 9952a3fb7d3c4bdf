#include "coordinator/seq_output.h"

namespace treespec {
namespace {

int64_t Ns(SeqOutput::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStopToken: return v1::FINISH_REASON_STOP;
    case FinishReason::kStopString: return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}

}  // namespace

SeqOutput::SeqOutput(std::shared_ptr<RequestState> req, const Tokenizer* tokenizer)
    : req_(std::move(req)) {
  if (tokenizer != nullptr) detok_ = std::make_unique<IncrementalDetokenizer>(tokenizer);
  // The stop strings were validated with the request.
  stops_ = *StopStringMatcher::Create(req_->request().stop_strings);
}

FinishReason SeqOutput::Emit(const std::vector<int32_t>& new_tokens) {
  const GenerationRequest& g = req_->request();
  const StopDecision d = ApplyStops(new_tokens, g.stop_token_ids, g.max_tokens - counted_);
  v1::GenerateResponse chunk;
  FinishReason finish = d.finish;
  int32_t counted = d.num_counted;
  for (int32_t i = 0; i < d.num_emit; ++i) {
    chunk.add_token_ids(new_tokens[i]);
    if (detok_ == nullptr) continue;
    StopStringMatcher::Output o = stops_->Feed(detok_->Push(new_tokens[i]));
    chunk.mutable_text()->append(o.text);
    if (o.stopped) {
      finish = FinishReason::kStopString;
      counted = i + 1;
      break;
    }
  }
  counted_ += counted;
  if (finish != FinishReason::kNone && finish != FinishReason::kStopString && detok_ != nullptr) {
    StopStringMatcher::Output o = stops_->Feed(detok_->Finish());
    chunk.mutable_text()->append(o.text);
    if (o.stopped) {
      finish = FinishReason::kStopString;
    } else {
      chunk.mutable_text()->append(stops_->Flush());
    }
  }
  if (chunk.token_ids_size() > 0 || !chunk.text().empty()) req_->Push(std::move(chunk));
  return finish;
}

void SeqOutput::Final(FinishReason finish, const SpecTotals& totals, const Times& times) {
  const GenerationRequest& g = req_->request();
  v1::GenerateResponse last;
  last.set_finish_reason(ToProto(finish));
  last.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
  last.mutable_usage()->set_completion_tokens(counted_);
  v1::Timings* t = last.mutable_timings();
  t->set_queue_ns(Ns(times.admitted - req_->received()));
  t->set_ttft_ns(Ns(times.first_token - req_->received()));
  t->set_total_ns(Ns(times.last_token - req_->received()));
  if (counted_ > 1) {
    t->set_per_token_ns(Ns(times.last_token - times.first_token) / (counted_ - 1));
  }
  v1::SpeculationStats* sp = last.mutable_speculation();
  sp->set_drafter(g.drafter);
  sp->set_tree(totals.last_tree);
  sp->set_steps(totals.steps);
  sp->set_drafted_tokens(totals.drafted);
  sp->set_accepted_tokens(totals.accepted);
  sp->set_fallback_steps(totals.fallback_steps);
  sp->set_drafter_errors(totals.drafter_errors);
  if (totals.steps > 0) sp->set_mean_accepted_length(totals.mean_accepted_length());
  sp->set_plain_steps(totals.plain_steps);
  sp->set_planned_steps(totals.planned_steps);
  if (totals.planned_steps > 0) {
    sp->set_planned_expected_tokens(totals.planned_expected / totals.planned_steps);
    sp->set_planned_committed_tokens(static_cast<double>(totals.planned_committed) /
                                     totals.planned_steps);
  }
  sp->set_predraft_hits(totals.predraft_hits);
  sp->set_predraft_saved_ms(totals.predraft_saved_seconds * 1e3);
  sp->set_draft_ahead_steps(totals.ahead_steps);
  sp->set_draft_ahead_hits(totals.ahead_hits);
  sp->set_draft_ahead_saved_ms(totals.ahead_saved_seconds * 1e3);
  sp->set_draft_ahead_wait_ms(totals.ahead_wait_seconds * 1e3);
  last.set_seed(g.seed);
  req_->Push(std::move(last));
}

}  // namespace treespec
