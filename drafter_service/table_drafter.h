// TableDrafter: the part of a drafter that is only its sequence table — for
// drafters whose per-sequence state is small and lives in one
// SequenceTable<State> under one mutex (the n-gram and ReDrafter drafters),
// Release, ReleaseExpired and Stats are the table's, and are written once here.
// Drafters with model state (TreeDrafter) keep their own.
//
// Thread-safe: every member takes mu_.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/model/sequence_table.h"
#include "drafter_service/drafter.h"

namespace treespec {

template <typename State>
class TableDrafter : public Drafter {
 public:
  int Release(const std::vector<uint64_t>& ids) override {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (uint64_t id : ids) n += seqs_.Erase(id).has_value() ? 1 : 0;
    return n;
  }

  int ReleaseExpired() override {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(seqs_.TakeExpired().size());
  }

  DrafterStats Stats() const override {
    absl::MutexLock lock(&mu_);
    DrafterStats s;
    s.num_sequences = seqs_.size();
    s.slots_total = max_sequences_;
    s.slots_free = max_sequences_ - s.num_sequences;
    return s;
  }

 protected:
  explicit TableDrafter(const DrafterOptions& options)
      : max_sequences_(options.max_sequences),
        seqs_(SequenceTableOptions{options.max_sequences, options.sequence_lease}) {}

  const int64_t max_sequences_;
  mutable absl::Mutex mu_;
  SequenceTable<State> seqs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
