// NgramDrafter: speculation for any target without a trained drafter. It
// drafts from the sequence's own text: per sequence it indexes the history
// (prompt and committed tokens) by n-gram, n = 1..max_n, each n-gram mapping
// to the counts of the tokens that followed it. A node's children are the most
// frequent continuations of the LONGEST suffix (n >= min_n) of the history
// followed by the node's path that occurs earlier in the history — suffix
// matching as in SuffixDecoding (arXiv 2411.04975, Sec. 3) and llama.cpp's
// n-gram lookup drafters. Repetitive text (code, quotes, lists, answers that
// restate the prompt) gives long accepted chains at no model cost.
//
// The requested TreeShape bounds the tree: a node at level i gets at most N_i
// children, fewer (down to none) when the history has fewer continuations.
// No match at the root gives the root-only tree (a plain decoding step).
//
// Children are chosen deterministically (most frequent first), so no draft
// distribution q is sent: multi-round verification needs the children to be
// SAMPLED without replacement from the q it is given (core/spec/verify.h), and
// a count-based q could not be honoured by a deterministic top-count choice.
// Nodes without q are verified with the target-sampling rule, which is
// lossless for any children, so every verify mode stays exact; with
// temperature 0 the greedy rule is exact as always.
//
// Thread-safe: one mutex around every public call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/model/sequence_table.h"
#include "drafter_service/drafter.h"
#include "drafter_service/table_drafter.h"

namespace treespec {

// The n-gram index of one token history. Thread-compatible.
class NgramIndex {
 public:
  struct Continuation {
    int32_t token;
    int64_t count;
  };
  NgramIndex(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

  void Append(int32_t token);
  void Append(const std::vector<int32_t>& tokens) {
    for (int32_t t : tokens) Append(t);
  }
  const std::vector<int32_t>& history() const { return history_; }

  // Continuations of the longest suffix of history ++ `path` (n in
  // [min_n, max_n]) seen in the history, most frequent first (ties: most
  // recently seen first); at most `limit`. Empty when nothing matches.
  // `match_len` (optional) receives the n used (0: no match).
  std::vector<Continuation> Lookup(const std::vector<int32_t>& path, int limit,
                                   int32_t* match_len = nullptr) const;

 private:
  struct Follower {
    int32_t token;
    int64_t count;
    int64_t last_pos;  // history position of its latest occurrence
  };
  const int32_t min_n_, max_n_;
  std::vector<int32_t> history_;
  // Keyed by a 64-bit hash of the n-gram: a collision can only cost a wrong
  // draft, which verification rejects, never a wrong output.
  absl::flat_hash_map<uint64_t, std::vector<Follower>> followers_;
};

class NgramDrafter : public TableDrafter<NgramIndex> {
 public:
  // INVALID_ARGUMENT for a vocabulary size below 1 or bad n bounds.
  static absl::StatusOr<std::unique_ptr<NgramDrafter>> Create(const DrafterOptions& options);

  std::string kind() const override { return "ngram"; }
  int64_t vocab_size() const override { return options_.vocab_size; }
  std::vector<absl::Status> Open(const std::vector<DrafterOpenSpec>& specs) override;
  std::vector<DraftOutcome> Draft(const std::vector<DraftSpec>& specs) override;

  // The tree a shape allows from `index` rooted at its last token.
  static TokenTree ProposeTree(const NgramIndex& index, const TreeShape& shape);

 private:
  explicit NgramDrafter(const DrafterOptions& options)
      : TableDrafter(options), options_(options) {}
  absl::Status CheckDraft(const DraftSpec& s, BatchIds* ids, NgramIndex** index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DrafterOptions options_;
};

}  // namespace treespec
