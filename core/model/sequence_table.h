// SequenceTable: the table of open sequences that the worker (TargetRunner)
// and the drafters share: who is open, whose step comes next, and whose lease
// is still running. Pure data structure with an injectable clock.
//
//  - Insert: ALREADY_EXISTS when the id is open (or still opening),
//    RESOURCE_EXHAUSTED at max_sequences. An entry may be inserted hidden
//    (being prefilled): it counts against capacity and blocks its id, but
//    Find does not see it until Publish.
//  - Find: NOT_FOUND unless open and published; renews the lease.
//  - CheckStep: steps are numbered from 1; a repeated step or one out of
//    order is ABORTED and changes nothing.
//  - BatchIds: an id twice in one batch is INVALID_ARGUMENT.
//  - Leases: every Insert / Find / Publish renews the sequence's lease; with
//    a nonzero lease, TakeExpired removes (and returns) published sequences
//    nobody touched for that long, so that a dead client's sequences cannot
//    hold model memory forever.
//
// Thread-compatible: callers hold their own lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace treespec {

struct SequenceTableOptions {
  int64_t max_sequences = 256;
  absl::Duration lease = absl::ZeroDuration();  // zero: sequences never expire
  absl::Status Validate() const {
    if (max_sequences < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_sequences ", max_sequences, " must be >= 1"));
    }
    if (lease < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence lease ", absl::FormatDuration(lease), " must not be negative"));
    }
    return absl::OkStatus();
  }
};

// Ids seen so far in one batch.
class BatchIds {
 public:
  absl::Status Add(uint64_t id) {
    if (seen_.insert(id).second) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_id ", id, " appears twice in one request"));
  }

 private:
  std::set<uint64_t> seen_;
};

template <typename T>
class SequenceTable {
 public:
  using Clock = std::function<absl::Time()>;
  explicit SequenceTable(SequenceTableOptions options, Clock clock = &absl::Now)
      : options_(options), clock_(std::move(clock)) {}

  absl::Status CheckOpen(uint64_t id) const {
    if (entries_.count(id)) {
      return absl::AlreadyExistsError(absl::StrCat("sequence_id ", id, " is already open"));
    }
    if (static_cast<int64_t>(entries_.size()) >= options_.max_sequences) {
      return absl::ResourceExhaustedError(
          absl::StrCat("at the limit of ", options_.max_sequences, " open sequences"));
    }
    return absl::OkStatus();
  }
  absl::Status Insert(uint64_t id, T value, bool visible = true) {
    if (absl::Status st = CheckOpen(id); !st.ok()) return st;
    entries_.emplace(id, Entry{std::move(value), 1, clock_() + options_.lease, visible});
    return absl::OkStatus();
  }
  void Publish(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    it->second.visible = true;
    Renew(it->second);
  }
  absl::StatusOr<T*> Find(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end() || !it->second.visible) {
      return absl::NotFoundError(absl::StrCat("sequence_id ", id, " is not open"));
    }
    Renew(it->second);
    return &it->second.value;
  }
  // Also hidden entries; renews nothing. nullptr when absent.
  T* FindAny(uint64_t id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second.value;
  }
  bool IsVisible(uint64_t id) const {
    auto it = entries_.find(id);
    return it != entries_.end() && it->second.visible;
  }
  // `what` names the step ("step", "draft step"), `done` what a repeated one
  // was ("committed", "drafted").
  absl::Status CheckStep(uint64_t id, uint64_t step, const char* what, const char* done) const {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("sequence_id ", id, " is not open"));
    }
    const uint64_t next = it->second.next_step;
    if (step == next) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat(what, " ", step, " of sequence ", id,
                                           step < next ? absl::StrCat(" was already ", done)
                                                       : std::string(" is out of order"),
                                           " (expected ", next, ")"));
  }
  void AdvanceStep(uint64_t id) {
    auto it = entries_.find(id);
    if (it != entries_.end()) ++it->second.next_step;
  }
  std::optional<T> Erase(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    std::optional<T> value(std::move(it->second.value));
    entries_.erase(it);
    return value;
  }
  // Published sequences whose lease ran out, removed from the table.
  std::vector<std::pair<uint64_t, T>> TakeExpired() {
    std::vector<std::pair<uint64_t, T>> out;
    if (options_.lease <= absl::ZeroDuration()) return out;
    const absl::Time now = clock_();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.visible && it->second.expires <= now) {
        out.emplace_back(it->first, std::move(it->second.value));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const SequenceTableOptions& options() const { return options_; }
  // Whether pred(value) holds for some published sequence.
  template <typename Pred>
  bool AnyVisible(Pred pred) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const auto& e) { return e.second.visible && pred(e.second.value); });
  }

 private:
  struct Entry {
    T value;
    uint64_t next_step = 1;
    absl::Time expires;
    bool visible = true;
  };
  void Renew(Entry& e) { e.expires = clock_() + options_.lease; }

  SequenceTableOptions options_;
  Clock clock_;
  std::map<uint64_t, Entry> entries_;
};

}  // namespace treespec
