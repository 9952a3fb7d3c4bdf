// In-process fakes of the coordinator's client interfaces (coordinator/clients.h)
// for unit tests of lanes and the coordinator without gRPC.
//
// The fake target is a deterministic "model": the next token after t is
// FakeNext(t). FakeWorker verifies greedily (descends while a child is the
// next token, then appends the bonus) and keeps a sequence table with step
// checks and "already open" / "not open" errors like the real worker, and
// rejects malformed trees with INVALID_ARGUMENT. FakeDrafter proposes chains
// of FakeNext (a perfect drafter) unless told to fail or to send malformed
// trees. It drafts ahead (DraftRequest.ahead) like the real drafter: per
// item, candidates for the outcomes "every drafted token accepted" (right for
// a good drafter) and "none accepted, a bonus nobody predicts" (never right),
// best first, each the chain a Draft with those new tokens returns; it checks
// the items' steps and answers omit_tree commits without their tree. Knobs
// and observations are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/clients.h"
#include "core/spec/tree_shape.h"
#include "rpc/status_convert.h"

namespace treespec::testing {

inline constexpr int32_t kFakeVocab = 50;
inline int32_t FakeNext(int32_t t) { return (t * 7 + 3) % kFakeVocab; }
// FakeWorker's reported forward time: per step plus per tree token.
inline constexpr int64_t kFakeForwardNsPerStep = 1000000;
inline constexpr int64_t kFakeForwardNsPerToken = 100000;
// FakeDrafter's reported draft time per tree level.
inline constexpr int64_t kFakeDraftNsPerLevel = 100000;

// Polls `condition` every 2 ms until it holds or `timeout` passes.
template <typename F>
bool Eventually(F condition, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The target's greedy continuation of `prompt`: `n` tokens.
inline std::vector<int32_t> FakeReference(const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  int32_t t = prompt.back();
  for (int i = 0; i < n; ++i) out.push_back(t = FakeNext(t));
  return out;
}

class FakeWorker {
 public:
  std::atomic<bool> fail_verify{false};
  std::atomic<int> verify_delay_ms{0};
  std::atomic<int> release_failures{0};  // fail this many Release calls first

  // While held, Open blocks (without blocking Verify).
  void HoldOpens(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_opens_ = hold;
  }

  absl::StatusOr<v1::WorkerOpenResponse> Open(const v1::WorkerOpenRequest& req) {
    {
      absl::MutexLock lock(&mu_);
      opens_in_flight_ += 1;
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_opens_; };
      mu_.Await(absl::Condition(&released));
      opens_in_flight_ -= 1;
    }
    absl::MutexLock lock(&mu_);
    v1::WorkerOpenResponse resp;
    for (const v1::WorkerOpenSequence& s : req.sequences()) {
      v1::WorkerOpenResult* r = resp.add_results();
      r->set_sequence_id(s.sequence_id());
      opened_ids_.push_back(s.sequence_id());
      seeds_.push_back(s.sampling().has_seed() ? static_cast<int64_t>(s.sampling().seed()) : -1);
      if (open_.count(s.sequence_id())) {
        ToProto(absl::AlreadyExistsError(
                    absl::StrCat("sequence_id ", s.sequence_id(), " is already open")),
                r->mutable_status());
        continue;
      }
      const int32_t first = FakeNext(s.prompt(s.prompt_size() - 1));
      open_[s.sequence_id()] = {first, 1};
      r->set_first_token(first);
    }
    return resp;
  }

  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& req) {
    if (verify_delay_ms.load() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(verify_delay_ms.load()));
    }
    absl::MutexLock lock(&mu_);
    num_verifies_ += 1;
    if (fail_verify.load()) return absl::UnavailableError("connection refused");
    v1::VerifyResponse resp;
    int64_t tree_tokens = 0;
    for (const v1::SequenceStep& st : req.steps()) {
      v1::StepResult* r = resp.add_results();
      r->set_sequence_id(st.sequence_id());
      r->set_step(st.step());
      absl::Status s = VerifyOne(st, r);
      ToProto(s, r->mutable_status());
      tree_tokens += st.tree().tokens_size();
    }
    // A simulated forward time, linear in the batch's tree tokens, so cost
    // models see a verify step that grows with the tree.
    resp.set_forward_ns(kFakeForwardNsPerStep + kFakeForwardNsPerToken * tree_tokens);
    return resp;
  }

  absl::Status Release(const v1::ReleaseRequest& req) {
    absl::MutexLock lock(&mu_);
    num_release_calls_ += 1;
    if (release_failures.load() > 0) {
      release_failures.fetch_sub(1);
      return absl::UnavailableError("connection refused");
    }
    for (uint64_t id : req.sequence_ids()) {
      released_.insert(id);
      open_.erase(id);
    }
    return absl::OkStatus();
  }

  v1::WorkerInfo Info() const {
    v1::WorkerInfo info;
    info.set_model("fake");
    info.set_vocab_size(kFakeVocab);
    info.set_max_context(4096);
    info.set_model_kind(model_kind);
    info.set_hidden_size(hidden_size);
    return info;
  }
  // What Info reports of the model (set before the coordinator starts;
  // empty / 0: unset, as from an older worker).
  std::string model_kind;
  int64_t hidden_size = 0;

  int num_verifies() {
    absl::MutexLock lock(&mu_);
    return num_verifies_;
  }
  int num_bad_trees() {
    absl::MutexLock lock(&mu_);
    return num_bad_trees_;
  }
  int num_drafted_steps() {
    absl::MutexLock lock(&mu_);
    return num_drafted_steps_;
  }
  int opens_in_flight() {
    absl::MutexLock lock(&mu_);
    return opens_in_flight_;
  }
  int num_release_calls() {
    absl::MutexLock lock(&mu_);
    return num_release_calls_;
  }
  bool released(uint64_t id) {
    absl::MutexLock lock(&mu_);
    return released_.count(id) > 0;
  }
  bool is_open(uint64_t id) {
    absl::MutexLock lock(&mu_);
    return open_.count(id) > 0;
  }
  int num_open() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(open_.size());
  }
  std::vector<uint64_t> opened_ids() {
    absl::MutexLock lock(&mu_);
    return opened_ids_;
  }
  std::vector<int64_t> seeds() {  // per Open, -1 when unset
    absl::MutexLock lock(&mu_);
    return seeds_;
  }

 private:
  struct Seq {
    int32_t last;
    uint64_t step;
  };

  absl::Status VerifyOne(const v1::SequenceStep& st, v1::StepResult* r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = open_.find(st.sequence_id());
    if (it == open_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence_id ", st.sequence_id(), " is not open"));
    }
    const v1::TokenTree& t = st.tree();
    if (t.tokens_size() < 1 || t.parents_size() != t.tokens_size()) {
      num_bad_trees_ += 1;
      return absl::InvalidArgumentError("tree: tokens and parents differ in size");
    }
    for (int i = 0; i < t.tokens_size(); ++i) {
      const bool bad_parent = i == 0 ? t.parents(0) != -1 : t.parents(i) < 0 || t.parents(i) >= i;
      if (t.tokens(i) < 0 || t.tokens(i) >= kFakeVocab || bad_parent) {
        num_bad_trees_ += 1;
        return absl::InvalidArgumentError(absl::StrCat("tree.tokens[", i, "]: ", t.tokens(i),
                                                       " is malformed"));
      }
    }
    if (st.step() != it->second.step) return absl::AbortedError("step out of order");
    if (t.tokens(0) != it->second.last) return absl::InvalidArgumentError("tree: wrong root");
    if (t.tokens_size() > 1) num_drafted_steps_ += 1;
    int node = 0;
    int32_t accepted = 0;
    r->add_accepted_nodes(0);
    while (true) {
      const int32_t want = FakeNext(t.tokens(node));
      int child = -1;
      for (int i = node + 1; i < t.tokens_size(); ++i) {
        if (t.parents(i) == node && t.tokens(i) == want) child = i;
      }
      r->add_tokens(want);
      if (child < 0) break;
      node = child;
      r->add_accepted_nodes(node);
      accepted += 1;
    }
    r->set_num_accepted(accepted);
    it->second.last = r->tokens(r->tokens_size() - 1);
    it->second.step += 1;
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  bool hold_opens_ ABSL_GUARDED_BY(mu_) = false;
  int opens_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Seq> open_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> released_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> opened_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> seeds_ ABSL_GUARDED_BY(mu_);
  int num_verifies_ ABSL_GUARDED_BY(mu_) = 0;
  int num_bad_trees_ ABSL_GUARDED_BY(mu_) = 0;
  int num_drafted_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int num_release_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeDrafter {
 public:
  // kUseless: well-formed chains the worker never accepts.
  enum class Mode { kGood, kFailRpc, kMalformed, kUseless };
  std::atomic<Mode> mode{Mode::kGood};
  // Draft-ahead: the most candidates per item it reports (0: it does not
  // draft ahead), a failure of every call with ahead items, a delay of those
  // calls, and every how many items it leaves the right outcome out (0: never).
  std::atomic<int> ahead_candidates{2};
  std::atomic<bool> fail_ahead{false};
  std::atomic<int> ahead_delay_ms{0};
  std::atomic<int> ahead_miss_every{0};
  // The drafting time it reports per tree level (the planner's cost model
  // learns from it).
  std::atomic<int64_t> draft_ns_per_level{kFakeDraftNsPerLevel};
  // What Info reports of the features it reads (set before the coordinator
  // starts; empty: a token drafter).
  std::vector<int32_t> feature_layers;
  std::string target_model_kind;
  int64_t target_hidden_size = 0;

  absl::StatusOr<v1::DrafterOpenResponse> Open(const v1::DrafterOpenRequest& req) {
    absl::MutexLock lock(&mu_);
    if (mode.load() == Mode::kFailRpc) return absl::UnavailableError("drafter down");
    v1::DrafterOpenResponse resp;
    for (const v1::DrafterOpenSequence& s : req.sequences()) {
      v1::DrafterOpenResult* r = resp.add_results();
      r->set_sequence_id(s.sequence_id());
      if (open_.count(s.sequence_id())) {
        ToProto(absl::AlreadyExistsError("already open"), r->mutable_status());
        continue;
      }
      open_[s.sequence_id()] = 1;
      num_opened_ += 1;
    }
    return resp;
  }

  absl::StatusOr<v1::DraftResponse> Draft(const v1::DraftRequest& req) {
    if (req.ahead_size() > 0 && ahead_delay_ms.load() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ahead_delay_ms.load()));
    }
    absl::MutexLock lock(&mu_);
    if (mode.load() == Mode::kFailRpc) return absl::UnavailableError("drafter down");
    if (req.ahead_size() > 0 && fail_ahead.load()) return absl::UnavailableError("drafter down");
    v1::DraftResponse resp;
    int deepest = 0;
    for (const v1::DraftSequence& d : req.sequences()) {
      v1::DraftResult* r = resp.add_results();
      r->set_sequence_id(d.sequence_id());
      r->set_step(d.step());
      if (!d.catch_up()) shapes_[d.tree()] += 1;
      catch_ups_ += d.catch_up();
      commits_ += d.omit_tree();
      auto it = open_.find(d.sequence_id());
      if (it == open_.end() || it->second != d.step() || d.new_tokens_size() == 0) {
        ToProto(absl::AbortedError("not open or out of order"), r->mutable_status());
        continue;
      }
      it->second += 1;
      absl::StatusOr<TreeShape> shape = TreeShape::Parse(d.tree());
      const int depth = d.catch_up() ? 0 : shape.ok() ? shape->Depth() : 1;
      deepest = std::max(deepest, depth);
      const v1::TokenTree tree = Chain(d.new_tokens(d.new_tokens_size() - 1), depth);
      last_[d.sequence_id()] = tree;
      if (!d.omit_tree()) *r->mutable_tree() = tree;
    }
    for (const v1::AheadSequence& a : req.ahead()) Ahead(a, resp.add_ahead());
    resp.set_draft_ns(draft_ns_per_level.load() * deepest);
    return resp;
  }

  absl::Status Release(const v1::ReleaseDraftsRequest& req) {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : req.sequence_ids()) open_.erase(id);
    return absl::OkStatus();
  }

  int num_opened() {
    absl::MutexLock lock(&mu_);
    return num_opened_;
  }
  std::map<std::string, int> shapes() {
    absl::MutexLock lock(&mu_);
    return shapes_;
  }
  int catch_ups() {
    absl::MutexLock lock(&mu_);
    return catch_ups_;
  }
  int ahead_items() {
    absl::MutexLock lock(&mu_);
    return ahead_items_;
  }
  int commits() {  // omit_tree commits of candidates
    absl::MutexLock lock(&mu_);
    return commits_;
  }

 private:
  // A Draft's tree: `depth` tokens after `root` (wrong ones when useless).
  v1::TokenTree Chain(int32_t root, int depth) const {
    v1::TokenTree tree;
    tree.add_tokens(root);
    tree.add_parents(-1);
    int32_t t = root;
    for (int i = 0; i < depth; ++i) {
      t = FakeNext(t);
      if (mode.load() == Mode::kUseless) t = (t + 1) % kFakeVocab;
      tree.add_tokens(mode.load() == Mode::kMalformed ? kFakeVocab + 7 : t);
      tree.add_parents(i);
    }
    return tree;
  }

  void Ahead(const v1::AheadSequence& a, v1::AheadResult* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ahead_items_ += 1;
    r->set_sequence_id(a.sequence_id());
    r->set_step(a.step());
    auto it = open_.find(a.sequence_id());
    auto last = last_.find(a.sequence_id());
    if (it == open_.end() || it->second != a.step() || last == last_.end()) {
      ToProto(absl::AbortedError("ahead step out of order"), r->mutable_status());
      return;
    }
    absl::StatusOr<TreeShape> shape = TreeShape::Parse(a.tree());
    const int depth = shape.ok() ? shape->Depth() : 1;
    const v1::TokenTree& t = last->second;
    std::vector<std::vector<int32_t>> outcomes;
    const int every = ahead_miss_every.load();
    if (every <= 0 || ahead_items_ % every != 0) {
      std::vector<int32_t> all(t.tokens().begin() + 1, t.tokens().end());
      all.push_back(FakeNext(t.tokens(t.tokens_size() - 1)));
      outcomes.push_back(std::move(all));
    }
    outcomes.push_back({(FakeNext(t.tokens(0)) + 1) % kFakeVocab});
    for (size_t k = 0; k < outcomes.size() && static_cast<int>(k) < a.max_candidates(); ++k) {
      v1::AheadCandidate* c = r->add_candidates();
      c->mutable_new_tokens()->Assign(outcomes[k].begin(), outcomes[k].end());
      *c->mutable_tree() = Chain(outcomes[k].back(), depth);
    }
  }

  absl::Mutex mu_;
  std::map<uint64_t, uint64_t> open_ ABSL_GUARDED_BY(mu_);  // id -> next step
  std::map<uint64_t, v1::TokenTree> last_ ABSL_GUARDED_BY(mu_);  // id -> last tree
  int ahead_items_ ABSL_GUARDED_BY(mu_) = 0;
  int commits_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> shapes_ ABSL_GUARDED_BY(mu_);
  int catch_ups_ ABSL_GUARDED_BY(mu_) = 0;
  int num_opened_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeWorkerClient final : public WorkerClient {
 public:
  explicit FakeWorkerClient(FakeWorker* w, std::string address = "fake-worker")
      : w_(w), address_(std::move(address)) {}
  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::WorkerOpenResponse> Open(const v1::WorkerOpenRequest& req,
                                              std::chrono::milliseconds) override {
    return w_->Open(req);
  }
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& req,
                                            std::chrono::milliseconds) override {
    return w_->Verify(req);
  }
  absl::Status Release(const v1::ReleaseRequest& req, std::chrono::milliseconds) override {
    return w_->Release(req);
  }
  absl::StatusOr<v1::WorkerInfo> Info(std::chrono::milliseconds) override { return w_->Info(); }

 private:
  FakeWorker* w_;
  std::string address_;
};

class FakeDrafterClient final : public DrafterClient {
 public:
  explicit FakeDrafterClient(FakeDrafter* d) : d_(d) {}
  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::DrafterOpenResponse> Open(const v1::DrafterOpenRequest& req,
                                               std::chrono::milliseconds) override {
    return d_->Open(req);
  }
  absl::StatusOr<v1::DraftResponse> Draft(const v1::DraftRequest& req,
                                          std::chrono::milliseconds) override {
    return d_->Draft(req);
  }
  absl::Status Release(const v1::ReleaseDraftsRequest& req, std::chrono::milliseconds) override {
    return d_->Release(req);
  }
  absl::StatusOr<v1::DrafterInfoResponse> Info(std::chrono::milliseconds) override {
    v1::DrafterInfoResponse info;
    info.set_kind("fake");
    info.set_vocab_size(kFakeVocab);
    info.set_max_ahead_candidates(d_->ahead_candidates.load());
    info.mutable_feature_layers()->Assign(d_->feature_layers.begin(), d_->feature_layers.end());
    info.set_target_model_kind(d_->target_model_kind);
    info.set_target_hidden_size(d_->target_hidden_size);
    return info;
  }

 private:
  FakeDrafter* d_;
  std::string address_ = "fake-drafter";
};

}  // namespace treespec::testing
