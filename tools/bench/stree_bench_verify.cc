#include "tools/bench/stree_bench_verify.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/ssm_tree_batch.h"
#include "core/util/status_macros.h"

namespace treespec::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double ProcessCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tail tokens a verified sequence writes: the tree, or its longest branch.
int64_t TailTokens(Method method, const BenchTree& tree) {
  return method == Method::kTree ? tree.num_nodes() : tree.depth;
}

// The pools: every verified sequence (and, unrolled, each of its branches)
// plus the prompt and a probe; one more token of capacity for Continue.
SequenceModelOptions PoolOptions(Method method, const BenchTree& tree,
                                 const VerifyArm::Options& o) {
  const int64_t per_seq = method == Method::kTree ? 1 : tree.num_branches();
  SequenceModelOptions s;
  s.max_sequences = o.max_batch * per_seq + 2;
  s.max_tail_nodes = TailTokens(method, tree);
  s.kv_block_size = o.kv_block_size;
  s.kv_blocks = s.max_sequences * CeilDiv(o.prompt + s.max_tail_nodes + 1, o.kv_block_size);
  return s;
}

}  // namespace

const char* MethodName(Method m) { return m == Method::kTree ? "tree" : "unrolled"; }

int64_t VerifyArm::EstimatePoolBytes(Method method, const BenchModel& model,
                                     const BenchTree& tree, const Options& options) {
  const HybridConfig& c = model.config;
  const SequenceModelOptions s = PoolOptions(method, tree, options);
  const int64_t ssm_layers = c.num_layers - c.num_attention_layers();
  const int64_t slot = ssm_layers * 4 * (c.conv_dim() * c.conv_kernel +
                                         c.ssm_heads * c.ssm_head_dim * c.ssm_state);
  const int64_t row = ssm_layers * 4 * (c.conv_dim() + c.ssm_heads);
  const int64_t block = c.num_attention_layers() * 2 * 4 * s.kv_block_size *
                        c.attn.num_kv_heads * c.attn.head_dim;
  return 2 * s.max_sequences * slot + s.max_sequences * s.max_tail_nodes * row +
         s.kv_blocks * block;
}

absl::StatusOr<std::unique_ptr<VerifyArm>> VerifyArm::Create(Method method,
                                                             const BenchModel& model,
                                                             const BenchTree& tree,
                                                             const Options& options,
                                                             Backend* backend) {
  if (options.accept < 1 || options.accept > tree.depth) {
    return absl::InvalidArgumentError(absl::StrCat("accepted path of ", options.accept,
                                                   " nodes in a tree of depth ", tree.depth));
  }
  auto arm = std::unique_ptr<VerifyArm>(new VerifyArm());
  arm->method_ = method;
  arm->tree_ = tree;
  arm->options_ = options;
  arm->backend_ = backend;
  arm->accepted_.assign(tree.branches[0].begin(), tree.branches[0].begin() + options.accept);
  const int64_t before = backend->memory_stats().in_use_bytes;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<HybridModel> m, BuildModel(model, backend));
  TS_RETURN_IF_ERROR(backend->Synchronize());
  arm->weight_bytes_ = backend->memory_stats().in_use_bytes - before;
  arm->vocab_ = m->config().vocab_size;
  TS_ASSIGN_OR_RETURN(arm->model_, HybridSequenceModel::Create(
                                       std::move(m), PoolOptions(method, tree, options)));
  Mamba2StatePool* pool = arm->model_->pool();
  for (int64_t l = 0; l < pool->dims().num_layers; ++l) {
    arm->unit_.slot += static_cast<int64_t>(pool->conv(l)->nbytes() + pool->ssm(l)->nbytes());
    arm->unit_.cache_row += static_cast<int64_t>(pool->cache(l)->nbytes());
  }
  arm->unit_.slot /= pool->num_slots();
  if (pool->dims().num_layers > 0) arm->unit_.cache_row /= pool->cache(0)->dim(0);
  if (PagedKvCache* kv = arm->model_->kv_cache(); kv != nullptr) {
    for (int64_t l = 0; l < kv->options().num_layers; ++l) {
      arm->unit_.kv_block += static_cast<int64_t>(kv->k(l)->nbytes() + kv->v(l)->nbytes());
    }
    arm->unit_.kv_block /= kv->options().num_blocks;
  }
  TS_RETURN_IF_ERROR(arm->Prefill());
  return arm;
}

VerifyArm::~VerifyArm() { Close(); }

// The prompt, committed; then a probe fork of it measures one sequence at rest.
absl::Status VerifyArm::Prefill() {
  TS_ASSIGN_OR_RETURN(prompt_seq_, model_->Open(options_.prompt));
  std::vector<int32_t> prompt(options_.prompt);
  for (int i = 0; i < options_.prompt; ++i) {
    prompt[i] = static_cast<int32_t>((i * 7919 + 31) % vocab_);
  }
  ForwardOutput out;
  TS_RETURN_IF_ERROR(model_->Forward({{prompt_seq_, prompt, {}, LogitsMode::kNone}}, &out));
  TS_RETURN_IF_ERROR(model_->Commit(prompt_seq_, options_.prompt));
  const auto [s0, b0] = Usage();
  TS_ASSIGN_OR_RETURN(const int64_t probe, model_->ForkPath(prompt_seq_, {}, options_.prompt));
  const auto [s1, b1] = Usage();
  model_->Release(probe);
  rest_slots_ = s1 - s0;
  rest_blocks_ = b1 - b0;
  return backend_->Synchronize();
}

std::pair<int64_t, int64_t> VerifyArm::Usage() const {
  Mamba2StatePool* pool = model_->pool();
  PagedKvCache* kv = model_->kv_cache();
  return {pool->num_slots() - pool->num_free(), kv != nullptr ? kv->num_used_blocks() : 0};
}

int32_t VerifyArm::Token(int b, int32_t node) const {
  return static_cast<int32_t>((17 + 131 * node + 7919 * static_cast<int64_t>(b)) % vocab_);
}

absl::Status VerifyArm::Open(int batch) {
  if (batch > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " > max_batch ",
                                                   options_.max_batch));
  }
  Close();
  const auto [s0, b0] = Usage();
  const int64_t capacity = options_.prompt + TailTokens(method_, tree_) + 1;
  for (int b = 0; b < batch; ++b) {
    TS_ASSIGN_OR_RETURN(const int64_t h, model_->ForkPath(prompt_seq_, {}, capacity));
    open_.push_back(h);
  }
  open_extra_blocks_ = (Usage().second - b0) - batch * rest_blocks_;
  return backend_->Synchronize();
}

void VerifyArm::Close() {
  for (int64_t h : forks_) model_->Release(h);
  for (int64_t h : open_) model_->Release(h);
  forks_.clear();
  open_.clear();
}

absl::Status VerifyArm::Fork(std::vector<int64_t>* forks) {
  const int64_t capacity = options_.prompt + tree_.depth;
  for (int64_t h : open_) {
    for (int64_t j = 1; j < tree_.num_branches(); ++j) {
      TS_ASSIGN_OR_RETURN(const int64_t f, model_->ForkPath(h, {}, capacity));
      forks->push_back(f);
    }
  }
  return backend_->Synchronize();
}

std::vector<ForwardSeq> VerifyArm::Batch() const {
  std::vector<ForwardSeq> seqs;
  const int64_t k = tree_.num_branches();
  for (int b = 0; b < static_cast<int>(open_.size()); ++b) {
    if (method_ == Method::kTree) {
      ForwardSeq fs{open_[b], {}, tree_.parents, LogitsMode::kAll};
      for (int32_t v = 0; v < tree_.num_nodes(); ++v) fs.tokens.push_back(Token(b, v));
      seqs.push_back(std::move(fs));
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      ForwardSeq fs{j == 0 ? open_[b] : forks_[b * (k - 1) + j - 1], {}, {}, LogitsMode::kAll};
      for (int32_t v : tree_.branches[j]) fs.tokens.push_back(Token(b, v));
      seqs.push_back(std::move(fs));
    }
  }
  return seqs;
}

absl::Status VerifyArm::Commit() {
  for (int64_t h : open_) {
    if (method_ == Method::kTree) {
      TS_RETURN_IF_ERROR(model_->CommitPath(h, accepted_));
    } else {  // branch 0, the sequence itself, holds the accepted path
      TS_RETURN_IF_ERROR(model_->Commit(h, static_cast<int64_t>(accepted_.size())));
    }
  }
  for (int64_t h : forks_) model_->Release(h);
  forks_.clear();
  return backend_->Synchronize();
}

absl::StatusOr<VerifySample> VerifyArm::Verify(ForwardOutput* out, VerifyMemory* mem) {
  if (open_.empty()) return absl::FailedPreconditionError("Verify before Open");
  const auto [slots0, blocks0] = Usage();
  int64_t in0 = 0;
  if (mem != nullptr) {
    model_->model()->ReleaseWorkspace();
    TS_RETURN_IF_ERROR(backend_->Synchronize());
    backend_->ResetPeakMemory();
    in0 = backend_->memory_stats().in_use_bytes;
  }
  VerifySample s;
  const double c0 = ProcessCpuMs();
  const auto t0 = Clock::now();
  if (method_ == Method::kUnrolled) TS_RETURN_IF_ERROR(Fork(&forks_));
  const auto t1 = Clock::now();
  const std::vector<ForwardSeq> seqs = Batch();
  TS_RETURN_IF_ERROR(model_->Forward(seqs, out));
  const auto t2 = Clock::now();
  const auto [slots1, blocks1] = Usage();
  TS_RETURN_IF_ERROR(Commit());
  const auto t3 = Clock::now();
  s.cpu_ms = ProcessCpuMs() - c0;
  s.fork_ms = Ms(t0, t1);
  s.forward_ms = Ms(t1, t2);
  s.commit_ms = Ms(t2, t3);
  if (mem == nullptr) return s;
  const int B = static_cast<int>(open_.size());
  int64_t tokens = 0;
  SsmTreeBatch plan;
  for (const ForwardSeq& fs : seqs) {
    tokens += static_cast<int64_t>(fs.tokens.size());
    plan.AddSequence(0, static_cast<int32_t>(fs.tokens.size()), fs.parents);
  }
  TS_RETURN_IF_ERROR(plan.Plan(1));
  mem->slots = slots1 - (slots0 - B * rest_slots_);
  mem->scan_buffers = plan.num_buffers;
  mem->state_bytes = (slots1 - slots0) * unit_.slot;
  mem->kv_bytes = (blocks1 - blocks0 + open_extra_blocks_) * unit_.kv_block;
  mem->cache_bytes = tokens * unit_.cache_row;
  mem->act_bytes = backend_->memory_stats().peak_bytes - in0;
  mem->logits_bytes = static_cast<int64_t>(out->logits.size() * sizeof(float));
  mem->rest_bytes = B * (rest_slots_ * unit_.slot + rest_blocks_ * unit_.kv_block);
  return s;
}

absl::Status VerifyArm::Continue(std::vector<float>* logits,
                                 std::vector<std::vector<float>>* states) {
  states->clear();
  std::vector<ForwardSeq> seqs;
  for (int b = 0; b < static_cast<int>(open_.size()); ++b) {
    if (model_->info().is_recurrent) {
      TS_ASSIGN_OR_RETURN(std::vector<float> st, model_->CommittedState(open_[b]));
      states->push_back(std::move(st));
    }
    seqs.push_back({open_[b], {Token(b, 1000)}, {}, LogitsMode::kLast});
  }
  ForwardOutput out;
  TS_RETURN_IF_ERROR(model_->Forward(seqs, &out));
  *logits = std::move(out.logits);
  return absl::OkStatus();
}

}  // namespace treespec::bench
