// CudaBackend: checks shapes and dtypes, turns CUDA errors into Status, and
// hands raw pointers to the per-op launchers in this directory.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/add.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fill_uniform.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/mamba_conv.h"
#include "kernels/cuda/mamba_scan.h"
#include "kernels/cuda/process_logits.h"
#include "kernels/cuda/qkv_rope.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/row_copy.h"
#include "kernels/cuda/silu_mul.h"
#include "kernels/cuda/slice_cols.h"

namespace treespec {
namespace cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kUploadChunk = int64_t{8} << 20;  // elements staged per conversion

int64_t RowSize(const Tensor& t) {
  int64_t n = 1;
  for (int i = 1; i < t.rank(); ++i) n *= t.dim(i);
  return n;
}

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

absl::Status Check(const Tensor& t, DType dtype, const char* what) {
  if (t.device() != DeviceKind::kCuda || t.dtype() != dtype || !t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: ", what, " must be ",
                                                   DTypeName(dtype), " on cuda, got ",
                                                   t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status ShapeError(const char* op, std::initializer_list<const Tensor*> ts) {
  std::string msg = absl::StrCat("cuda backend: ", op, ": bad shapes");
  for (const Tensor* t : ts) absl::StrAppend(&msg, " ", t->DebugString());
  return absl::InvalidArgumentError(msg);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, DType dtype) : device_(device), dtype_(dtype) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    cublas_workspace_ = Tensor();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    cudaDeviceProp prop;
    TS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_));
    num_sms_ = prop.multiProcessorCount;
    max_smem_optin_ = static_cast<int>(prop.sharedMemPerBlockOptin);
    device_name_ = prop.name;
    allocator_ = DeviceAllocator::Create(device_);
    TS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TS_CUDA_RETURN_IF_ERROR(cublasCreate(&cublas_));
    TS_CUDA_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
    // A fixed workspace keeps cuBLAS from allocating inside graph capture.
    TS_ASSIGN_OR_RETURN(cublas_workspace_, Scratch(DType::kU8, {static_cast<int64_t>(kCublasWorkspaceBytes)}));
    TS_CUDA_RETURN_IF_ERROR(
        cublasSetWorkspace(cublas_, cublas_workspace_.raw(), kCublasWorkspaceBytes));
    return Synchronize();
  }

  cudaStream_t stream() const { return stream_; }

  DeviceKind device() const override { return DeviceKind::kCuda; }
  std::string name() const override {
    return absl::StrCat("cuda:", device_, ":", DTypeName(dtype_), " (", device_name_, ")");
  }
  DType activation_dtype() const override { return dtype_; }

  // ---- memory -----------------------------------------------------------------
  absl::StatusOr<Tensor> Alloc(DType dtype, Shape shape) override {
    TS_ASSIGN_OR_RETURN(Tensor t, Scratch(dtype, std::move(shape)));
    TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
    return t;
  }

  absl::Status Upload(const void* src, DType src_dtype, Tensor* dst) override {
    TS_RETURN_IF_ERROR(Enter("Upload"));
    if (dst->device() != DeviceKind::kCuda) return ShapeError("Upload to a host tensor", {dst});
    const int64_t n = dst->numel();
    if (n == 0) return absl::OkStatus();
    if (src_dtype == dst->dtype()) {
      TS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst->raw(), src, dst->nbytes(), cudaMemcpyHostToDevice, stream_));
      return absl::OkStatus();
    }
    if (!IsFloat(src_dtype) || !IsFloat(dst->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("cuda backend: cannot convert ",
                                                     DTypeName(src_dtype), " to ",
                                                     DTypeName(dst->dtype())));
    }
    const int64_t chunk = std::min(n, kUploadChunk);
    TS_ASSIGN_OR_RETURN(Tensor staging, Scratch(src_dtype, {chunk}));
    const size_t in_size = DTypeSize(src_dtype), out_size = DTypeSize(dst->dtype());
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t count = std::min(chunk, n - at);
      TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.raw(),
                                              static_cast<const char*>(src) + at * in_size,
                                              count * in_size, cudaMemcpyHostToDevice, stream_));
      TS_CUDA_RETURN_IF_ERROR(LaunchConvert(src_dtype, staging.raw(), dst->dtype(),
                                            static_cast<char*>(dst->raw()) + at * out_size,
                                            count, stream_));
    }
    return absl::OkStatus();
  }

  absl::Status DownloadF32(const Tensor& src, float* dst) override {
    TS_RETURN_IF_ERROR(Enter("DownloadF32"));
    if (src.device() != DeviceKind::kCuda || (!IsFloat(src.dtype()) && src.dtype() != DType::kI32)) {
      return ShapeError("DownloadF32 (needs a float or i32 cuda tensor)", {&src});
    }
    const int64_t n = src.numel();
    if (n == 0) return absl::OkStatus();
    const void* from = src.raw();
    Tensor converted;
    if (src.dtype() != DType::kF32) {
      TS_ASSIGN_OR_RETURN(converted, Scratch(DType::kF32, {n}));
      TS_CUDA_RETURN_IF_ERROR(
          LaunchConvert(src.dtype(), src.raw(), DType::kF32, converted.raw(), n, stream_));
      from = converted.raw();
    }
    TS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, from, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Zero(Tensor* t) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    if (t->device() != DeviceKind::kCuda) return ShapeError("Zero", {t});
    TS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t->raw(), 0, t->nbytes(), stream_));
    return absl::OkStatus();
  }

  absl::Status FillUniform(Tensor* t, uint64_t seed, float scale) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    if (t->device() != DeviceKind::kCuda || !IsFloat(t->dtype())) {
      return ShapeError("FillUniform (needs a float cuda tensor)", {t});
    }
    TS_CUDA_RETURN_IF_ERROR(
        LaunchFillUniform(t->dtype(), t->raw(), t->numel(), seed, scale, stream_));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    TS_RETURN_IF_ERROR(Enter("Synchronize"));
    TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  // ---- dense ops --------------------------------------------------------------
  absl::Status Embedding(const Tensor& ids, const Tensor& table, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(ids, DType::kI32, "embedding ids"));
    TS_RETURN_IF_ERROR(Check(table, dtype_, "embedding table"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "embedding out"));
    if (table.rank() != 2 || out->numel() != ids.numel() * table.dim(1)) {
      return ShapeError("Embedding", {&ids, &table, out});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchEmbedding(ids.data<int32_t>(), ids.numel(), table.raw(),
                                            table.dim(1) * DTypeSize(dtype_), out->raw(),
                                            stream_));
    return absl::OkStatus();
  }

  absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(x, dtype_, "rmsnorm x"));
    TS_RETURN_IF_ERROR(Check(w, dtype_, "rmsnorm w"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "rmsnorm out"));
    const int64_t D = w.numel();
    if (D == 0 || x.numel() % D != 0 || out->numel() != x.numel()) {
      return ShapeError("RmsNorm", {&x, &w, out});
    }
    TS_CUDA_RETURN_IF_ERROR(
        LaunchRmsNorm(dtype_, x.raw(), w.raw(), x.numel() / D, D, eps, out->raw(), stream_));
    return absl::OkStatus();
  }

  absl::Status Linear(const Tensor& x, const Tensor& w, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(x, dtype_, "linear x"));
    TS_RETURN_IF_ERROR(Check(w, dtype_, "linear w"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "linear out"));
    if (w.rank() != 2 || x.rank() < 1 || RowSize(x) != w.dim(1) || out->rank() < 1 ||
        RowSize(*out) != w.dim(0) || out->dim(0) != x.dim(0)) {
      return ShapeError("Linear", {&x, &w, out});
    }
    return cuda::Linear(cublas_, dtype_, x.raw(), w.raw(), x.dim(0), w.dim(1), w.dim(0),
                        out->raw());
  }

  absl::Status Add(const Tensor& a, const Tensor& b, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(a, dtype_, "add a"));
    TS_RETURN_IF_ERROR(Check(b, dtype_, "add b"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "add out"));
    if (a.numel() != b.numel() || a.numel() != out->numel()) return ShapeError("Add", {&a, &b, out});
    TS_CUDA_RETURN_IF_ERROR(LaunchAdd(dtype_, a.raw(), b.raw(), a.numel(), out->raw(), stream_));
    return absl::OkStatus();
  }

  absl::Status AddBias(Tensor* x, const Tensor& bias) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(*x, dtype_, "add_bias x"));
    TS_RETURN_IF_ERROR(Check(bias, dtype_, "add_bias bias"));
    if (x->rank() < 1 || RowSize(*x) != bias.numel()) return ShapeError("AddBias", {x, &bias});
    TS_CUDA_RETURN_IF_ERROR(
        LaunchAddBias(dtype_, x->raw(), bias.raw(), x->dim(0), bias.numel(), stream_));
    return absl::OkStatus();
  }

  absl::Status HeadRmsNorm(Tensor* x, const Tensor& w, int64_t head_begin, int64_t num_heads,
                           float eps) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(*x, dtype_, "head_rmsnorm x"));
    TS_RETURN_IF_ERROR(Check(w, dtype_, "head_rmsnorm w"));
    const int64_t Dh = w.numel();
    if (x->rank() < 1 || Dh == 0 || RowSize(*x) % Dh != 0 || head_begin < 0 || num_heads < 0 ||
        (head_begin + num_heads) * Dh > RowSize(*x)) {
      return ShapeError("HeadRmsNorm", {x, &w});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchHeadRmsNorm(dtype_, x->raw(), w.raw(), x->dim(0), RowSize(*x),
                                              Dh, head_begin, num_heads, eps, stream_));
    return absl::OkStatus();
  }

  absl::Status SiluMul(const Tensor& gu, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(gu, dtype_, "silu_mul gu"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "silu_mul out"));
    if (gu.rank() != 2 || gu.dim(1) % 2 != 0 || out->numel() != gu.numel() / 2) {
      return ShapeError("SiluMul", {&gu, out});
    }
    TS_CUDA_RETURN_IF_ERROR(
        LaunchSiluMul(dtype_, gu.raw(), gu.dim(0), gu.dim(1) / 2, out->raw(), stream_));
    return absl::OkStatus();
  }

  absl::Status SliceCols(const Tensor& x, int64_t begin, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    if (x.device() != DeviceKind::kCuda || out->device() != DeviceKind::kCuda ||
        x.dtype() != out->dtype() || x.rank() != 2 || out->rank() != 2 ||
        out->dim(0) != x.dim(0) || begin < 0 || begin + out->dim(1) > x.dim(1)) {
      return ShapeError("SliceCols", {&x, out});
    }
    const int64_t size = DTypeSize(x.dtype());
    TS_CUDA_RETURN_IF_ERROR(LaunchSliceCols(x.raw(), x.dim(0), x.dim(1) * size, begin * size,
                                            out->raw(), out->dim(1) * size, stream_));
    return absl::OkStatus();
  }

  absl::Status GatherRows(const Tensor& x, const std::vector<int32_t>& rows,
                          Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    if (x.device() != DeviceKind::kCuda || out->device() != DeviceKind::kCuda ||
        x.dtype() != out->dtype() || x.rank() < 1 || out->rank() < 1 ||
        out->dim(0) != static_cast<int64_t>(rows.size()) || RowSize(*out) != RowSize(x)) {
      return ShapeError("GatherRows", {&x, out});
    }
    for (int32_t r : rows) {
      if (r < 0 || r >= x.dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat("GatherRows: row ", r, " outside [0, ",
                                                       x.dim(0), ")"));
      }
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchRowCopy(x.raw(), rows, out->raw(), {},
                                          static_cast<int64_t>(rows.size()),
                                          RowSize(x) * DTypeSize(x.dtype()), stream_));
    return absl::OkStatus();
  }

  // Sequential semantics (copy i sees the writes of copies < i) reduced to
  // one parallel step: `holds` tracks which original row each written row
  // ends up holding, so the final state is "row d := original row holds[d]".
  // If some row is both a source and a destination of that step, sources are
  // first gathered into scratch (KV compaction never needs this: its
  // destinations all precede its sources; see PagedKvCache::CommitPath).
  absl::Status CopyRows(Tensor* pool, const std::vector<int32_t>& src,
                        const std::vector<int32_t>& dst) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    if (pool->device() != DeviceKind::kCuda || pool->rank() < 1 || src.size() != dst.size()) {
      return ShapeError("CopyRows", {pool});
    }
    std::unordered_map<int32_t, int32_t> holds;
    std::vector<int32_t> order;
    for (size_t i = 0; i < src.size(); ++i) {
      for (int32_t r : {src[i], dst[i]}) {
        if (r < 0 || r >= pool->dim(0)) {
          return absl::InvalidArgumentError(absl::StrCat("CopyRows: row ", r, " outside [0, ",
                                                         pool->dim(0), ")"));
        }
      }
      auto it = holds.find(src[i]);
      const int32_t orig = it == holds.end() ? src[i] : it->second;
      if (holds.find(dst[i]) == holds.end()) order.push_back(dst[i]);
      holds[dst[i]] = orig;
    }
    std::vector<int32_t> from, to;
    for (int32_t d : order) {
      if (holds[d] == d) continue;
      from.push_back(holds[d]);
      to.push_back(d);
    }
    if (from.empty()) return absl::OkStatus();
    const std::unordered_set<int32_t> written(to.begin(), to.end());
    const bool overlap =
        std::any_of(from.begin(), from.end(), [&](int32_t r) { return written.count(r) > 0; });
    const int64_t n = static_cast<int64_t>(from.size());
    const int64_t row_bytes = RowSize(*pool) * DTypeSize(pool->dtype());
    if (!overlap) {
      TS_CUDA_RETURN_IF_ERROR(
          LaunchRowCopy(pool->raw(), from, pool->raw(), to, n, row_bytes, stream_));
      return absl::OkStatus();
    }
    TS_ASSIGN_OR_RETURN(Tensor scratch, Scratch(DType::kU8, {n * row_bytes}));
    TS_CUDA_RETURN_IF_ERROR(
        LaunchRowCopy(pool->raw(), from, scratch.raw(), {}, n, row_bytes, stream_));
    TS_CUDA_RETURN_IF_ERROR(
        LaunchRowCopy(scratch.raw(), {}, pool->raw(), to, n, row_bytes, stream_));
    return absl::OkStatus();
  }

  // ---- attention ----------------------------------------------------------------
  absl::StatusOr<std::unique_ptr<AttentionPlan>> PlanAttention(
      const AttentionBatch& batch) override {
    TS_RETURN_IF_ERROR(Enter("PlanAttention"));
    TS_ASSIGN_OR_RETURN(std::unique_ptr<CudaAttentionPlan> plan,
                        CudaAttentionPlan::Create(batch, this));
    return std::unique_ptr<AttentionPlan>(std::move(plan));
  }

  absl::Status QkvRope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                       const AttentionPlan& plan_base, Tensor* q, Tensor* k_cache,
                       Tensor* v_cache) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_ASSIGN_OR_RETURN(const CudaAttentionPlan* plan, Plan(plan_base));
    TS_RETURN_IF_ERROR(Check(qkv, dtype_, "qkv"));
    TS_RETURN_IF_ERROR(Check(positions, DType::kI32, "positions"));
    TS_RETURN_IF_ERROR(Check(inv_freq, DType::kF32, "inv_freq"));
    TS_RETURN_IF_ERROR(Check(*q, dtype_, "q"));
    TS_RETURN_IF_ERROR(Check(*k_cache, dtype_, "k_cache"));
    TS_RETURN_IF_ERROR(Check(*v_cache, dtype_, "v_cache"));
    const int64_t T = plan->batch().num_tokens();
    if (q->rank() != 3 || k_cache->rank() != 3 || v_cache->shape() != k_cache->shape() ||
        q->dim(0) != T || q->dim(2) != k_cache->dim(2) || q->dim(2) % 2 != 0 ||
        qkv.numel() != T * (q->dim(1) + 2 * k_cache->dim(1)) * q->dim(2) ||
        positions.numel() != T || inv_freq.numel() != q->dim(2) / 2 ||
        plan->max_slot >= k_cache->dim(0)) {
      return ShapeError("QkvRope", {&qkv, &positions, &inv_freq, q, k_cache});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchQkvRope(
        dtype_, qkv.raw(), positions.data<int32_t>(), inv_freq.data<float>(), plan->token_slots,
        T, static_cast<int>(q->dim(1)), static_cast<int>(k_cache->dim(1)),
        static_cast<int>(q->dim(2)), q->raw(), k_cache->raw(), v_cache->raw(), stream_));
    return absl::OkStatus();
  }

  absl::Status Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionPlan& plan_base, float scale, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_ASSIGN_OR_RETURN(const CudaAttentionPlan* plan, Plan(plan_base));
    TS_RETURN_IF_ERROR(Check(q, dtype_, "q"));
    TS_RETURN_IF_ERROR(Check(k_cache, dtype_, "k_cache"));
    TS_RETURN_IF_ERROR(Check(v_cache, dtype_, "v_cache"));
    TS_RETURN_IF_ERROR(Check(*out, dtype_, "attention out"));
    const AttentionBatch& batch = plan->batch();
    if (q.rank() != 3 || k_cache.rank() != 3 || v_cache.shape() != k_cache.shape() ||
        q.dim(0) != batch.num_tokens() || q.dim(2) != k_cache.dim(2) ||
        q.dim(1) % k_cache.dim(1) != 0 || out->numel() != q.numel() ||
        plan->max_slot >= k_cache.dim(0)) {
      return ShapeError("Attention", {&q, &k_cache, out});
    }
    const int H = static_cast<int>(q.dim(1)), Hkv = static_cast<int>(k_cache.dim(1));
    const int Dh = static_cast<int>(q.dim(2));
    TS_ASSIGN_OR_RETURN(const CudaAttentionPlan::Work* work,
                        plan->WorkFor(H / Hkv, Hkv, num_sms_, this));
    const AttentionWork& w = work->work;
    Tensor partials;
    const size_t partial_floats = AttentionPartialFloats(w, Hkv, Dh);
    if (partial_floats > 0) {
      TS_ASSIGN_OR_RETURN(partials, Scratch(DType::kF32, {static_cast<int64_t>(partial_floats)}));
    }
    AttentionArgs a;
    a.dtype = dtype_;
    a.q = q.raw();
    a.k_cache = k_cache.raw();
    a.v_cache = v_cache.raw();
    a.out = out->raw();
    a.query_start = plan->query_start;
    a.context_lens = plan->context_lens;
    a.prior_lens = plan->prior_lens;
    a.block_tables = plan->block_tables;
    a.mask_offset = plan->mask_offset;
    a.mask_words = plan->mask_words;
    a.max_blocks_per_seq = batch.max_blocks_per_seq;
    a.block_size = batch.block_size;
    a.H = H;
    a.Hkv = Hkv;
    a.Dh = Dh;
    a.scale = scale;
    a.items = work->items;
    a.num_items = static_cast<int>(w.items.size());
    a.groups = work->groups;
    a.num_groups = static_cast<int>(w.groups.size());
    a.rows_per_block = w.rows_per_block;
    a.partials = partials.defined() ? partials.data<float>() : nullptr;
    a.max_smem_bytes = max_smem_optin_;
    const cudaError_t err = LaunchAttention(a, stream_);
    if (err == cudaErrorInvalidValue) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda attention: head_dim ", Dh, " must be a multiple of 8 (4 for f32) and <= 256"));
    }
    TS_CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }

  // ---- Mamba --------------------------------------------------------------------
  absl::Status MambaConv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* state,
                         Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(CheckAll({&x, &w, &b, state, out}, "mamba conv"));
    const int64_t L = x.dim(0), C = x.dim(1), K = w.dim(1);
    if (x.rank() != 2 || w.numel() != C * K || b.numel() != C || state->numel() != C * K ||
        out->numel() != L * C) {
      return ShapeError("MambaConv", {&x, &w, &b, state, out});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchMambaConv(dtype_, x.raw(), L, C, w.raw(), b.raw(),
                                            static_cast<int>(K), state->raw(), out->raw(),
                                            stream_));
    return absl::OkStatus();
  }

  absl::Status MambaConvBatch(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& slots, Tensor* states, Tensor* out) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(CheckAll({&x, &w, &b, states, out}, "mamba conv batch"));
    TS_RETURN_IF_ERROR(Check(slots, DType::kI32, "slots"));
    const int64_t B = x.dim(0), C = x.dim(1), K = w.dim(1);
    if (x.rank() != 2 || w.numel() != C * K || b.numel() != C || slots.numel() != B ||
        RowSize(*states) != C * K || out->numel() != B * C) {
      return ShapeError("MambaConvBatch", {&x, &w, &b, &slots, states, out});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchMambaConvBatch(dtype_, x.raw(), B, C, w.raw(), b.raw(),
                                                 static_cast<int>(K), slots.data<int32_t>(),
                                                 states->raw(), out->raw(), stream_));
    return absl::OkStatus();
  }

  absl::Status MambaScan(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                         const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                         const Tensor& z, Tensor* state, Tensor* y) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(CheckAll({&u, &delta, &Bm, &Cm, &z, y}, "mamba scan"));
    TS_RETURN_IF_ERROR(CheckAllF32({&dt_bias, &A, &D, state}, "mamba scan"));
    const int64_t L = u.dim(0), C = u.dim(1), N = A.dim(1);
    if (u.rank() != 2 || A.rank() != 2 || delta.numel() != L * C || z.numel() != L * C ||
        dt_bias.numel() != C || A.dim(0) != C || Bm.numel() != L * N || Cm.numel() != L * N ||
        D.numel() != C || state->numel() != C * N || y->numel() != L * C) {
      return ShapeError("MambaScan", {&u, &A, &Bm, state, y});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchMambaScan(
        dtype_, u.raw(), delta.raw(), dt_bias.data<float>(), A.data<float>(), Bm.raw(), Cm.raw(),
        D.data<float>(), z.raw(), L, C, static_cast<int>(N), state->data<float>(), y->raw(),
        stream_));
    return absl::OkStatus();
  }

  absl::Status MambaScanBatch(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                              const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                              const Tensor& D, const Tensor& z, const Tensor& slots,
                              Tensor* states, Tensor* y) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(CheckAll({&u, &delta, &Bm, &Cm, &z, y}, "mamba scan batch"));
    TS_RETURN_IF_ERROR(CheckAllF32({&dt_bias, &A, &D, states}, "mamba scan batch"));
    TS_RETURN_IF_ERROR(Check(slots, DType::kI32, "slots"));
    const int64_t B = u.dim(0), C = u.dim(1), N = A.dim(1);
    if (u.rank() != 2 || A.rank() != 2 || delta.numel() != B * C || z.numel() != B * C ||
        dt_bias.numel() != C || A.dim(0) != C || Bm.numel() != B * N || Cm.numel() != B * N ||
        D.numel() != C || slots.numel() != B || RowSize(*states) != C * N ||
        y->numel() != B * C) {
      return ShapeError("MambaScanBatch", {&u, &A, &Bm, &slots, states, y});
    }
    TS_CUDA_RETURN_IF_ERROR(LaunchMambaScanBatch(
        dtype_, u.raw(), delta.raw(), dt_bias.data<float>(), A.data<float>(), Bm.raw(), Cm.raw(),
        D.data<float>(), z.raw(), B, C, static_cast<int>(N), slots.data<int32_t>(),
        states->data<float>(), y->raw(), stream_));
    return absl::OkStatus();
  }

  // ---- sampling -------------------------------------------------------------------
  absl::Status ArgmaxRows(const Tensor& logits, std::vector<int32_t>* ids) override {
    TS_RETURN_IF_ERROR(Enter("ArgmaxRows"));
    if (logits.device() != DeviceKind::kCuda || !IsFloat(logits.dtype()) || logits.rank() != 2) {
      return ShapeError("ArgmaxRows", {&logits});
    }
    const int64_t R = logits.dim(0), V = logits.dim(1);
    ids->resize(R);
    if (R == 0) return absl::OkStatus();
    TS_ASSIGN_OR_RETURN(Tensor out, Scratch(DType::kI32, {R}));
    TS_CUDA_RETURN_IF_ERROR(
        LaunchArgmaxRows(logits.dtype(), logits.raw(), R, V, out.data<int32_t>(), stream_));
    TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids->data(), out.raw(), R * sizeof(int32_t),
                                            cudaMemcpyDeviceToHost, stream_));
    TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status ProcessLogitsRows(const Tensor& logits, float temperature, int top_k,
                                 float top_p, Tensor* probs) override {
    TS_RETURN_IF_ERROR(Enter(nullptr));
    TS_RETURN_IF_ERROR(Check(*probs, DType::kF32, "probs"));
    if (logits.device() != DeviceKind::kCuda || !IsFloat(logits.dtype()) || logits.rank() != 2 ||
        probs->numel() != logits.numel()) {
      return ShapeError("ProcessLogitsRows", {&logits, probs});
    }
    if (!(temperature > 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ProcessLogitsRows: temperature ", temperature, " must be > 0"));
    }
    const int64_t R = logits.dim(0), V = logits.dim(1);
    if (R * V > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError("ProcessLogitsRows: more than 2^31 logits");
    }
    const size_t ws_bytes = ProcessLogitsWorkspaceBytes(R, V);
    TS_ASSIGN_OR_RETURN(Tensor ws, Scratch(DType::kU8, {static_cast<int64_t>(ws_bytes)}));
    TS_CUDA_RETURN_IF_ERROR(LaunchProcessLogits(logits.dtype(), logits.raw(), R, V, temperature,
                                                top_k, top_p, probs->data<float>(), ws.raw(),
                                                ws_bytes, stream_));
    return absl::OkStatus();
  }

  // ---- graphs ---------------------------------------------------------------------
  absl::StatusOr<int> CaptureGraph(const std::function<absl::Status()>& body) override {
    TS_RETURN_IF_ERROR(Enter("CaptureGraph"));
    TS_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    const absl::Status body_status = body();
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!body_status.ok() || end != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      if (!body_status.ok()) return body_status;
      TS_CUDA_RETURN_IF_ERROR(end);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    TS_CUDA_RETURN_IF_ERROR(inst);
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }

  absl::Status ReplayGraph(int graph_id) override {
    TS_RETURN_IF_ERROR(Enter("ReplayGraph"));
    if (graph_id < 0 || graph_id >= static_cast<int>(graphs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("ReplayGraph: no graph ", graph_id));
    }
    TS_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[graph_id], stream_));
    return absl::OkStatus();
  }

 private:
  // Makes the device current; ops that must not run inside a graph capture
  // (host transfers, allocation, synchronisation) name themselves in `op`.
  absl::Status Enter(const char* op) {
    if (capturing_) {
      if (op == nullptr) return absl::OkStatus();  // the capturing thread's device is current
      return absl::FailedPreconditionError(
          absl::StrCat("cuda backend: ", op, " is not allowed while capturing a graph"));
    }
    TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return absl::OkStatus();
  }

  // Uninitialised device memory from the caching allocator.
  absl::StatusOr<Tensor> Scratch(DType dtype, Shape shape) {
    TS_RETURN_IF_ERROR(Enter("Alloc"));
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("Alloc: negative dim in ", ShapeString(shape)));
      n *= d;
    }
    const size_t bytes = std::max<size_t>(1, static_cast<size_t>(n) * DTypeSize(dtype));
    TS_ASSIGN_OR_RETURN(std::shared_ptr<void> storage, allocator_->Allocate(bytes));
    void* p = storage.get();
    return Tensor(dtype, std::move(shape), DeviceKind::kCuda, std::move(storage), p);
  }

  absl::StatusOr<const CudaAttentionPlan*> Plan(const AttentionPlan& plan) {
    const auto* p = dynamic_cast<const CudaAttentionPlan*>(&plan);
    if (p == nullptr) {
      return absl::InvalidArgumentError("cuda backend: attention plan from another backend");
    }
    return p;
  }

  absl::Status CheckAll(std::initializer_list<const Tensor*> ts, const char* what) {
    for (const Tensor* t : ts) TS_RETURN_IF_ERROR(Check(*t, dtype_, what));
    return absl::OkStatus();
  }
  absl::Status CheckAllF32(std::initializer_list<const Tensor*> ts, const char* what) {
    for (const Tensor* t : ts) TS_RETURN_IF_ERROR(Check(*t, DType::kF32, what));
    return absl::OkStatus();
  }

  const int device_;
  const DType dtype_;
  std::string device_name_;
  int num_sms_ = 1;
  int max_smem_optin_ = 48 * 1024;
  std::shared_ptr<DeviceAllocator> allocator_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  Tensor cublas_workspace_;
  bool capturing_ = false;
  std::vector<cudaGraphExec_t> graphs_;
};

}  // namespace

cudaStream_t StreamOf(Backend* backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  return cuda == nullptr ? nullptr : cuda->stream();
}

}  // namespace cuda

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index, DType dtype) {
  if (dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: storage dtype must be f16 or bf16, got ", DTypeName(dtype)));
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device: cudaGetDeviceCount: ",
                                               cudaGetErrorName(err), " (",
                                               cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: cudaGetDeviceCount() == 0");
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--device: cuda:", device_index,
                                                   " does not exist (", count, " devices)"));
  }
  auto backend = std::make_unique<cuda::CudaBackend>(device_index, dtype);
  TS_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace treespec
