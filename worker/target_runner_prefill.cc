// TargetRunner's prefill: how a long prompt is admitted without stalling the
// sequences already streaming (issue 10 point 3).
//
// A prompt is fed in pieces. While live streams send Verify calls, each
// Verify pass carries the next piece of the waiting prompts in the same
// forward batch (chunked prefill fused with decoding, Sarathi-Serve's
// stall-free batching): a forward pass costs a fixed part (on a CPU, reading
// every weight once) plus a part per token, so a piece that rides on a pass
// costs only its per-token part, and the live step it slows is one the
// streams were taking anyway. The piece is sized from a fit of measured pass
// times, fixed + per_token * tokens + per_position * attended positions (a
// token late in a long prompt attends all the prompt before it, so pieces
// shrink as the prompt fills), so that it adds TargetRunnerOptions::
// prefill_share to the pass: a live stream's step takes at most about
// 1 + prefill_share times as long during the admission, whatever the prompt
// length. The bound is also held against the streams' usual pace: the pass
// with its piece may take at most 1 + prefill_share times what the recent
// passes' trees alone take (an EMA over every pass of the fit's prediction
// for its trees; it was once the measured time of passes that carried no
// piece, which froze while prompts kept arriving), so a step whose
// trees are already large for the streams (speculative trees vary in size
// from step to step) carries a smaller piece, down to one token, instead of
// half again its own time: in prefill_stall_test the streams' steps with
// 7-token trees took 2x their usual 4-token ones once a piece rode on them.
// The share is 0.15 by default (the worker's --prefill_share). In
// prefill_stall_test (three 480-token admissions beside three live streams,
// 2 cores) the streams' p99 gap during the admissions was 1.55-1.82x their
// median around them in 8 of 8 runs with 0.15, and 1.68-2.06x with 0.2 and
// 1.54-2.03x with 0.25 (one run of 8 over 2x each): every pass of an
// admission is slowed by about the share, and the machine's own p99 is
// already 1.3-1.55x the median, so 0.25 left no margin. The admission takes
// 1.5-1.7 s with 0.15 and 1.0-1.3 s with 0.25. A prompt whose rest fits in
// the share of the pass is fed whole even where the usual-pass bound allows
// less (FusedTokens): with 0.15, 64 clients on the CPU demo pair otherwise
// kept 40-43 sequences live and the first token at 220-450 ms
// (docs/operations.md).
// When no open sequence has verified for a few step intervals (no live
// streams: none verified lately, or those that did were released, as when a
// client sends its next request the moment its last one finished), Open
// runs passes of its own, at most prefill_chunk_tokens long, sized to half a
// verify pass while streams were live recently, and lets a waiting Verify go
// first between them.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/spec/philox.h"
#include "worker/target_runner.h"

namespace treespec {
namespace {

bool NoCallWaiting(std::atomic<int>* waiting) { return waiting->load() == 0; }

// Passes observed before the pass-time fit is trusted.
constexpr int64_t kMinPassesForFit = 8;

}  // namespace

std::vector<TargetRunner::Prefill> TargetRunner::BeginOpen(const std::vector<OpenSpec>& specs,
                                                           std::vector<OpenOutcome>* out) {
  std::vector<Prefill> work;
  BatchIds ids;
  for (size_t i = 0; i < specs.size(); ++i) {
    const OpenSpec& spec = specs[i];
    OpenOutcome& o = (*out)[i];
    o.id = spec.id;
    o.status = CheckOpen(spec);
    if (o.status.ok()) o.status = ids.Add(spec.id);
    if (!o.status.ok()) continue;
    Seq seq;
    seq.sampling = spec.sampling;
    seq.seed = spec.seed;
    seq.feature_layers = spec.feature_layers;
    seq.max_total = spec.max_total_tokens > 0 ? spec.max_total_tokens : options_.max_context;
    absl::StatusOr<int64_t> handle = model_->Open(seq.max_total + options_.max_tree_nodes);
    if (!handle.ok()) {
      o.status = handle.status();
      continue;
    }
    seq.handle = *handle;
    o.status = table_.Insert(spec.id, seq, /*visible=*/false);
    if (!o.status.ok()) {
      model_->Release(*handle);
      continue;
    }
    Prefill p;
    p.id = spec.id;
    p.handle = *handle;
    p.prompt = &spec.prompt;
    p.out = &o;
    work.push_back(p);
  }
  return work;
}

std::vector<OpenOutcome> TargetRunner::Open(const std::vector<OpenSpec>& specs) {
  std::vector<OpenOutcome> out(specs.size());
  mu_.Lock();
  std::vector<Prefill> work = BeginOpen(specs, &out);
  for (Prefill& p : work) prefilling_.push_back(&p);
  auto all_done = [&work] {
    return std::all_of(work.begin(), work.end(), [](const Prefill& p) { return p.done; });
  };
  // Re-evaluated whenever another call releases the lock: a Release of the
  // last live stream ends the wait at once.
  auto done_or_idle = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return all_done() || !StreamsLive(); };
  while (!all_done()) {
    if (StreamsLive()) {
      // Verify passes carry the prompt; wake up to take over if they stop.
      mu_.AwaitWithTimeout(absl::Condition(&done_or_idle), IdleWait());
      continue;
    }
    RunOwnChunk();
    // Waiting Verify and Release calls go first.
    mu_.Unlock();
    mu_.LockWhen(absl::Condition(&NoCallWaiting, &calls_waiting_));
  }
  auto mine = [&work](const Prefill* p) {
    return std::any_of(work.begin(), work.end(), [p](const Prefill& w) { return &w == p; });
  };
  prefilling_.erase(std::remove_if(prefilling_.begin(), prefilling_.end(), mine),
                    prefilling_.end());
  mu_.Unlock();
  return out;
}

bool TargetRunner::StreamsLive() const { return VerifiedWithin(IdleWait()); }

bool TargetRunner::VerifiedWithin(absl::Duration d) const {
  // A sequence that verified lately but has been released (its stream
  // ended) carries no prompt: the Open of a client's next request, sent
  // right after the last one finished, must not wait for its Verify.
  const absl::Time since = absl::Now() - d;
  if (last_verify_at_ <= since) return false;  // nobody verified since
  return table_.AnyVisible([since](const Seq& s) { return s.last_verified > since; });
}

absl::Duration TargetRunner::IdleWait() const {
  // A few step intervals without a Verify mean the streams are gone.
  return std::clamp(absl::Seconds(3 * verify_interval_s_), absl::Milliseconds(10),
                    absl::Milliseconds(100));
}

double TargetRunner::Attended(int64_t before, int64_t n) {
  const double k = static_cast<double>(n);
  return k * static_cast<double>(before) + 0.5 * k * (k + 1);
}

bool TargetRunner::HasPassFit() const {
  const std::vector<double>& theta = pass_time_.coefficients();
  return pass_time_.num_observed() >= kMinPassesForFit && (theta[1] > 0 || theta[2] > 0);
}

int64_t TargetRunner::OldestFed() const {
  for (const Prefill* p : prefilling_) {
    if (!p->done) return static_cast<int64_t>(p->fed);
  }
  return 0;
}

int64_t TargetRunner::PieceTokensWithin(double budget_s, int64_t most) const {
  // per_token * n + per_position * Attended(fed, n) <= budget, a quadratic in
  // n: the piece's tokens attend the prompt fed so far, so at the end of a
  // long prompt each token costs more than at its start.
  const std::vector<double>& theta = pass_time_.coefficients();
  const double a = 0.5 * theta[2];
  const double b = theta[1] + theta[2] * (static_cast<double>(OldestFed()) + 0.5);
  double n = static_cast<double>(most);
  if (budget_s <= 0) {
    n = 1;
  } else if (a > 0) {
    n = (-b + std::sqrt(b * b + 4 * a * budget_s)) / (2 * a);
  } else if (b > 0) {
    n = budget_s / b;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(std::min(n, static_cast<double>(most))), 1,
                             most);
}

int64_t TargetRunner::ChunkTokens() const {
  // Verify batches this recent mean live streams: keep each own pass at
  // about half of theirs, so a live step waits for at most half a step.
  constexpr absl::Duration kLive = absl::Milliseconds(250);
  const int64_t most = options_.prefill_chunk_tokens;
  if (!VerifiedWithin(kLive)) return most;
  if (!HasPassFit()) return std::clamp<int64_t>(last_verify_tokens_ / 2, 1, most);
  return PieceTokensWithin(0.5 * last_verify_ns_ * 1e-9 - pass_time_.coefficients()[0], most);
}

double TargetRunner::PieceShare(int64_t streams) const {
  // Growing a pass by d delays each of its S streams by d; the pieces it
  // carries bring forward the first tokens of the W sequences waiting. The
  // streams' total delay per pass may be share * pass for each of
  // max(S, W) sequences: with fewer prompts waiting than streams (a long
  // prompt beside live streams, prefill_stall_test) the bound is
  // prefill_share as before; with many (a burst of short requests, or
  // clients that all finished together) the batch refills in a few passes
  // instead of one token a pass.
  int64_t waiting = 0;
  for (const Prefill* p : prefilling_) waiting += p->done ? 0 : 1;
  const double per_stream =
      static_cast<double>(waiting) / static_cast<double>(std::max<int64_t>(1, streams));
  return options_.prefill_share * std::max(1.0, per_stream);
}

int64_t TargetRunner::FusedTokens(int64_t streams, int64_t verify_tokens,
                                  double verify_attended, int64_t* whole) const {
  // The piece may add PieceShare of the pass the trees alone would take, as
  // the fit predicts it. Without a fit the fixed part of a pass is taken as
  // 0 and a prompt token as dear as a tree token (n = share * v holds the
  // bound for any pass time that grows at most linearly in the tokens and
  // their context). Pass times are noisy, so a piece never exceeds
  // 4 * share * v tokens, which bounds the damage of a wrong fit.
  const double v = static_cast<double>(verify_tokens);
  const double share = PieceShare(streams);
  const int64_t most = std::clamp<int64_t>(static_cast<int64_t>(4 * share * v), 1,
                                           options_.prefill_chunk_tokens);
  if (!HasPassFit()) {
    *whole = std::clamp<int64_t>(static_cast<int64_t>(share * v), 1, most);
    return *whole;
  }
  const double verify_s = pass_time_.Predict({1.0, v, verify_attended});
  double budget = share * verify_s;
  *whole = PieceTokensWithin(budget, most);
  // Nor may the pass exceed 1 + share times the streams' usual pass (an EMA
  // of what their trees take): a pass whose trees are already large for them
  // carries a smaller piece, or one token when they alone pass that bound.
  // Except a prompt whose rest fits in the share of the pass (`whole`): it
  // delays the streams once, and the batch grows exactly so while prompts
  // are admitted (the EMA lags behind it), so that one token a pass held 64
  // clients' batch at about 40 sequences (TakePieces).
  if (streams_pass_s_ > 0) {
    budget = std::min(budget, (1 + share) * streams_pass_s_ - verify_s);
  }
  return PieceTokensWithin(budget, most);
}

void TargetRunner::ObservePass(int64_t tokens, double attended, int64_t ns) {
  if (tokens > 0) pass_time_.Observe({1.0, static_cast<double>(tokens), attended}, ns * 1e-9);
}

double TargetRunner::PiecesAttended(const std::vector<Prefill*>& pieces,
                                    const std::vector<ForwardSeq>& batch, size_t first) {
  double attended = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    attended += Attended(static_cast<int64_t>(pieces[k]->fed),
                         static_cast<int64_t>(batch[first + k].tokens.size()));
  }
  return attended;
}

void TargetRunner::FailOpen(Prefill* p, absl::Status st) {
  model_->Release(p->handle);
  table_.Erase(p->id);
  p->out->status = std::move(st);
  p->done = true;
}

std::vector<TargetRunner::Prefill*> TargetRunner::TakePieces(int64_t budget, int64_t whole,
                                                             std::vector<ForwardSeq>* batch) {
  std::vector<Prefill*> pieces;
  // Shortest remaining prompt first: a short prompt that arrives while a
  // long one is admitted is fed at once instead of waiting behind it (its
  // first token came after the whole long admission before). The oldest
  // prompt still gets a token of every pass, so a run of short ones cannot
  // starve it.
  std::vector<Prefill*> order;
  for (Prefill* p : prefilling_) {
    if (!p->done) order.push_back(p);
  }
  Prefill* const oldest = order.empty() ? nullptr : order.front();
  std::stable_sort(order.begin(), order.end(), [](const Prefill* a, const Prefill* b) {
    return a->prompt->size() - a->fed < b->prompt->size() - b->fed;
  });
  for (Prefill* p : order) {
    if (table_.FindAny(p->id)->release_requested) {
      FailOpen(p, absl::CancelledError(absl::StrCat(
                      "sequence_id ", p->id, " was released while its prompt was prefilled")));
      continue;
    }
    const int64_t rest = static_cast<int64_t>(p->prompt->size() - p->fed);
    if (rest > budget && rest <= whole) budget = rest;
    if (p == oldest && budget <= 0) budget = 1;
    if (budget <= 0) continue;
    const size_t end = std::min(p->prompt->size(), p->fed + static_cast<size_t>(budget));
    const bool last = end == p->prompt->size();
    // A drafter reading features needs every prompt row's hidden states;
    // logits only for the last row (the first token).
    ForwardSeq piece;
    piece.kv_seq = p->handle;
    piece.tokens.assign(p->prompt->begin() + p->fed, p->prompt->begin() + end);
    piece.logits = last ? LogitsMode::kLast : LogitsMode::kNone;
    piece.hidden_all = !table_.FindAny(p->id)->feature_layers.empty();
    batch->push_back(std::move(piece));
    budget -= static_cast<int64_t>(end - p->fed);
    whole -= static_cast<int64_t>(end - p->fed);
    pieces.push_back(p);
  }
  return pieces;
}

void TargetRunner::FinishPieces(const std::vector<Prefill*>& pieces,
                                const std::vector<ForwardSeq>& batch, size_t first,
                                const absl::Status& st, const ForwardOutput& fo,
                                const std::vector<int32_t>& hidden_layers) {
  for (size_t k = 0; k < pieces.size(); ++k) {
    Prefill* p = pieces[k];
    const ForwardSeq& piece = batch[first + k];
    const int64_t n = static_cast<int64_t>(piece.tokens.size());
    absl::Status seq_st = st.ok() ? model_->Commit(p->handle, n) : st;
    if (!seq_st.ok()) {
      FailOpen(p, seq_st);
      continue;
    }
    p->fed += static_cast<size_t>(n);
    Seq* seq = table_.FindAny(p->id);
    if (!seq->feature_layers.empty()) {
      std::vector<int32_t> rows(static_cast<size_t>(n));
      for (int32_t r = 0; r < static_cast<int32_t>(n); ++r) rows[r] = r;
      AppendFeatures(fo, hidden_layers, seq->feature_layers, fo.hidden_row_start[first + k], rows,
                     &p->out->features);
    }
    if (p->fed != p->prompt->size()) continue;
    absl::StatusOr<int32_t> first_token = FirstToken(*seq, fo, fo.row_start[first + k + 1] - 1);
    if (!first_token.ok()) {
      FailOpen(p, first_token.status());
      continue;
    }
    seq->pending = *first_token;
    seq->num_tokens = static_cast<int64_t>(p->prompt->size()) + 1;
    p->out->first_token = seq->pending;
    p->done = true;
    table_.Publish(p->id);
  }
}

void TargetRunner::RunOwnChunk() {
  std::vector<ForwardSeq> batch;
  const int64_t chunk = ChunkTokens();
  const std::vector<Prefill*> pieces = TakePieces(chunk, chunk, &batch);
  if (pieces.empty()) return;
  const double attended = PiecesAttended(pieces, batch, 0);
  const int64_t t0 = NowNs();
  ForwardOutput fo;
  ForwardOptions options;
  for (const Prefill* p : pieces) {
    options.hidden_layers =
        UnionLayers(options.hidden_layers, table_.FindAny(p->id)->feature_layers);
  }
  const absl::Status st = model_->Forward(batch, &fo, options);
  int64_t tokens = 0;
  for (const ForwardSeq& f : batch) tokens += static_cast<int64_t>(f.tokens.size());
  ObservePass(tokens, attended, NowNs() - t0);
  FinishPieces(pieces, batch, 0, st, fo, options.hidden_layers);
}

absl::StatusOr<int32_t> TargetRunner::FirstToken(const Seq& seq, const ForwardOutput& fo,
                                                 int64_t row) const {
  const int64_t V = model_->info().vocab_size;
  if (!fo.logits.empty()) {
    if (seq.sampling.greedy()) return Argmax(fo.row_logits(row), V);
    std::vector<float> probs;
    ProcessLogits(fo.row_logits(row), V, seq.sampling, &probs);
    return SampleDense(probs, Uniform({seq.seed, RngStream::kVerify, 0, 0}, 0));
  }
  if (seq.sampling.greedy()) return fo.argmax[row];
  std::vector<float> probs(V);
  absl::Status st = fo.fetch_probs(row, probs.data());
  if (!st.ok()) return st;
  return SampleDense(probs, Uniform({seq.seed, RngStream::kVerify, 0, 0}, 0));
}

}  // namespace treespec
