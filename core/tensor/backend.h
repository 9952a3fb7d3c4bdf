// Backend: the one interface through which models run their math.
//
// Every op has a plain-loop CPU implementation (kernels/cpu) and may have a
// CUDA one (kernels/cuda); models are written once against this interface and
// the implementation is chosen at start-up (like LevelDB's Env or ggml's
// backends). Tensors passed to a backend live on that backend's device and are
// contiguous, row-major, in activation_dtype() unless an op says otherwise.
// Index tensors are i32. All ops accumulate in fp32.
//
// Thread-compatibility: a Backend instance is used by one thread at a time
// (one model's forward pass); distinct instances are independent.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor/attention_batch.h"
#include "core/tensor/ssm_tree_batch.h"
#include "core/tensor/tensor.h"

namespace treespec {

// The counter-based generator behind Backend::FillUniform: murmur3's 64-bit
// finaliser of seed + i; its top 24 bits map exactly to a float in [-1, 1),
// then one rounding multiplies by scale. kernels/cuda/fill_uniform.cu repeats
// this formula bit for bit.
inline uint64_t FillUniformMix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
inline float FillUniformValue(uint64_t seed, int64_t i, float scale) {
  const uint64_t r = FillUniformMix(seed + static_cast<uint64_t>(i));
  return (static_cast<float>(r >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f) * scale;
}

// The scalar parameters of Backend::SsmTreeScan.
struct SsmScanParams {
  int64_t n_groups = 1;  // G: heads h·G/H .. share B and C group h / (H / G)
  // dt is clamped to [dt_min, dt_max] after the softplus (time_step_limit).
  float dt_min = 0.0f;
  float dt_max = std::numeric_limits<float>::infinity();
};

// A weight matrix stored as row blocks [N_i, K] (Backend::LinearRowBlocks):
// one tensor unless its parts are kept in different dtypes.
using RowBlocks = std::vector<Tensor>;

// Device memory held by a backend's live tensors (Alloc and the backend's own
// scratch), and the most held at once since ResetPeakMemory. Memory that a
// caching allocator keeps for reuse is not in use. For measuring what a pass
// needs (tools/bench/stree_bench); zeros where a backend does not count.
struct BackendMemoryStats {
  int64_t in_use_bytes = 0;
  int64_t peak_bytes = 0;
};

// Device-side form of an AttentionBatch (block tables, masks, slot mapping),
// built once per forward pass and shared by every layer.
class AttentionPlan {
 public:
  explicit AttentionPlan(AttentionBatch batch) : batch_(std::move(batch)) {}
  virtual ~AttentionPlan() = default;
  const AttentionBatch& batch() const { return batch_; }

 private:
  AttentionBatch batch_;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind device() const = 0;
  virtual std::string name() const = 0;
  // Element type of weights and activations on this backend.
  virtual DType activation_dtype() const = 0;

  // ---- memory -------------------------------------------------------------
  // Zero-initialised device tensor.
  virtual absl::StatusOr<Tensor> Alloc(DType dtype, Shape shape) = 0;
  // in: src [dst->numel()] host elements of src_dtype; out: dst (converted).
  virtual absl::Status Upload(const void* src, DType src_dtype, Tensor* dst) = 0;
  // in: src (any float dtype or i32); out: dst [src.numel()] host float32.
  virtual absl::Status DownloadF32(const Tensor& src, float* dst) = 0;
  virtual absl::Status Zero(Tensor* t) = 0;
  // out: t [any shape], float dtype; element i (row-major) = FillUniformValue(seed, i, scale),
  // rounded to t's dtype. Deterministic and identical on every backend, so a
  // random-weight model is the same model everywhere (and fills on the device).
  virtual absl::Status FillUniform(Tensor* t, uint64_t seed, float scale) = 0;
  virtual absl::Status Synchronize() = 0;
  // Bytes held now and at most since the last ResetPeakMemory (BackendMemoryStats).
  virtual BackendMemoryStats memory_stats() const { return {}; }
  virtual void ResetPeakMemory() {}
  // The dtype a weight matrix stored as `stored` is kept in on this backend
  // (what WeightLoader allocates for 2-D weights; norms, biases and the rest
  // use activation_dtype()). Only ops documented to accept it see such a
  // tensor: Linear's w and Embedding's table.
  virtual DType WeightDType(DType stored) const { return activation_dtype(); }
  // The dtype of a matrix fused from parts kept as `a` and `b` (WeightDType
  // of their stored dtypes): theirs when they agree, else one Upload converts
  // both to without loss where the backend has one, else f32's WeightDType.
  virtual DType FusedWeightDType(DType a, DType b) const {
    return a == b ? a : WeightDType(DType::kF32);
  }
  // Whether LinearRowBlocks takes a matrix as row blocks of different weight
  // dtypes. Where it does, WeightLoader::LoadRowBlocks keeps a fused matrix
  // whose parts FusedWeightDType could join only by widening to f32 (a GGUF
  // Q4_K_M stores q and k as Q4_K and v as Q6_K in half the layers) as one
  // block per part, each as stored.
  virtual bool TakesMixedRowBlocks() const { return false; }
  // True when a host buffer of `dtype` can be used in place as a weight (no copy).
  virtual bool CanAliasHost(DType dtype) const { return false; }
  // The stream every op of this backend is enqueued on, as an opaque handle
  // (a cudaStream_t on the CUDA backend), so that add-ons outside kernels/ (the
  // NCCL communicator) can order their work with the backend's without
  // including its headers. Null on backends without streams (CPU).
  virtual void* NativeStream() { return nullptr; }

  // ---- dense ops ----------------------------------------------------------
  // in: ids [T] i32, table [V, D] (activation dtype or WeightDType); out: out [T, D].
  // Ids are range-checked by callers.
  virtual absl::Status Embedding(const Tensor& ids, const Tensor& table, Tensor* out) = 0;
  // in: x [T, D], w [D]; out: out [T, D] = x / rms(x) * w. out may alias x.
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor* out) = 0;
  // in: x [T, K], w [N, K] (activation dtype or WeightDType); out: out [T, N] = x · wᵀ.
  virtual absl::Status Linear(const Tensor& x, const Tensor& w, Tensor* out) = 0;
  // in: x [T, K], w: row blocks w_i [N_i, K], each in its own weight dtype;
  // out: out [T, N_0 + N_1 + ...] = x · [w_0; w_1; ...]ᵀ. One block is Linear;
  // several need TakesMixedRowBlocks().
  virtual absl::Status LinearRowBlocks(const Tensor& x, const RowBlocks& w, Tensor* out) {
    if (w.size() == 1) return Linear(x, w[0], out);
    return absl::UnimplementedError(absl::StrCat(name(), " backend: a matrix of ", w.size(),
                                                 " row blocks (LinearRowBlocks)"));
  }
  // in: a, b [same shape]; out: out = a + b. out may alias a or b.
  virtual absl::Status Add(const Tensor& a, const Tensor& b, Tensor* out) = 0;
  // A residual add and the norm after it: inout x [T, D] += r; out [T, D] =
  // RmsNorm(x after the add, w). The same values as Add then RmsNorm (a
  // backend may do both in one pass). out may alias r, not x (both are outputs).
  virtual absl::Status AddRmsNorm(Tensor* x, const Tensor& r, const Tensor& w, float eps,
                                  Tensor* out) {
    if (out->raw() == x->raw()) {
      return absl::InvalidArgumentError(
          "AddRmsNorm: out is x; the sum and its norm need two tensors");
    }
    if (absl::Status s = Add(*x, r, x); !s.ok()) return s;
    return RmsNorm(*x, w, eps, out);
  }
  // in: gu [T, 2F] (gate | up); out: out [T, F] = silu(gate) * up.
  virtual absl::Status SiluMul(const Tensor& gu, Tensor* out) = 0;
  // in: bias [N]; inout: x [T, N] += bias in every row (projection biases).
  virtual absl::Status AddBias(Tensor* x, const Tensor& bias) = 0;
  // in: w [Dh]; inout: x [T, W] seen as W / Dh heads of Dh columns per row:
  // heads [head_begin, head_begin + num_heads) of every row become
  // w · head / sqrt(mean(head²) + eps) (Qwen3's per-head q_norm / k_norm).
  virtual absl::Status HeadRmsNorm(Tensor* x, const Tensor& w, int64_t head_begin,
                                   int64_t num_heads, float eps) = 0;
  // in: x [T, W]; out: out [T, n] = x[:, begin : begin + n].
  virtual absl::Status SliceCols(const Tensor& x, int64_t begin, Tensor* out) = 0;
  // in: x [T, D], rows [n] host indices; out: out [n, D] = x[rows].
  virtual absl::Status GatherRows(const Tensor& x, const std::vector<int32_t>& rows,
                                  Tensor* out) = 0;
  // inout: pool [R, ...]; copies row src[i] to row dst[i] in order i = 0, 1, ...
  // Used for KV compaction and for copying recurrent states between slots.
  virtual absl::Status CopyRows(Tensor* pool, const std::vector<int32_t>& src,
                                const std::vector<int32_t>& dst) = 0;

  // ---- attention over the paged KV cache -----------------------------------
  virtual absl::StatusOr<std::unique_ptr<AttentionPlan>> PlanAttention(
      const AttentionBatch& batch) = 0;
  // in: qkv [T, (H + 2·Hkv)·Dh] (q | k | v per token), positions [T] i32,
  //     inv_freq [Rd/2] f32 (RoPE, rotate-half convention, on the first Rd
  //     <= Dh columns of each head; the rest pass unrotated: partial rotary);
  // out: q [T, H, Dh] rotated; k_cache, v_cache [num_slots, Hkv, Dh] get the
  //      rotated k and the v of token t at slot plan.batch().Slot(...).
  virtual absl::Status QkvRope(const Tensor& qkv, const Tensor& positions,
                               const Tensor& inv_freq, const AttentionPlan& plan,
                               Tensor* q, Tensor* k_cache, Tensor* v_cache) = 0;
  // in: q [T, H, Dh], k_cache, v_cache [num_slots, Hkv, Dh]; out: out [T, H, Dh].
  // softmax(scale · q·kᵀ) · v over the positions the plan allows; GQA maps
  // query head h to kv head h / (H / Hkv).
  virtual absl::Status Attention(const Tensor& q, const Tensor& k_cache,
                                 const Tensor& v_cache, const AttentionPlan& plan,
                                 float scale, Tensor* out) = 0;

  // ---- Mamba (selective state space) ---------------------------------------
  // Depthwise causal conv + SiLU for one sequence of L tokens.
  // in: x [L, C], w [C, K], b [C]; inout: state [C, K] (last K inputs, oldest
  // first, as Hugging Face's conv_states); out: out [L, C].
  virtual absl::Status MambaConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                 Tensor* state, Tensor* out) = 0;
  // One step for B sequences whose states live in a pool.
  // in: x [B, C], w, b, slots [B] i32; inout: states [S, C, K]; out: out [B, C].
  virtual absl::Status MambaConvBatch(const Tensor& x, const Tensor& w, const Tensor& b,
                                      const Tensor& slots, Tensor* states, Tensor* out) = 0;
  // Selective scan for one sequence of L tokens (Mamba, Gu & Dao, Alg. 2):
  //   dt = softplus(delta + dt_bias), h = exp(dt·A)·h + dt·B·u,
  //   y = (C·h + D·u) · silu(z).
  // in: u, delta, z [L, C], dt_bias [C], A [C, N] (= -exp(A_log)), Bm, Cm [L, N],
  //     D [C]; inout: state [C, N]; out: y [L, C].
  virtual absl::Status MambaScan(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                                 const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                                 const Tensor& D, const Tensor& z, Tensor* state, Tensor* y) = 0;
  // One step for B sequences. in: u, delta, z [B, C], Bm, Cm [B, N], slots [B];
  // inout: states [S, C, N]; out: y [B, C].
  virtual absl::Status MambaScanBatch(const Tensor& u, const Tensor& delta,
                                      const Tensor& dt_bias, const Tensor& A, const Tensor& Bm,
                                      const Tensor& Cm, const Tensor& D, const Tensor& z,
                                      const Tensor& slots, Tensor* states, Tensor* y) = 0;

  // ---- Mamba-2 over packed token trees (STree, paper 001 §3) ------------------
  // Rows, parents and state slots are described by `batch` (SsmTreeBatch,
  // planned). CPU: kernels/cpu/ssm_tree_*.cc (the recurrence, bit for bit
  // with decoding); CUDA: kernels/cuda/ssm_tree_*.cu (the paper's matrix form,
  // within tolerance). Conv states are in the activation dtype, SSM states f32.
  //
  // Depthwise causal conv + SiLU along each row's root path: the K inputs a
  // row sees are its own and those of its K - 1 nearest ancestors, then the
  // newest entries of its sequence's committed conv state.
  // in: x [R, Cd], w [Cd, K], b [Cd]; inout: states [S, Cd, K] (the last K
  // inputs, oldest first, as Hugging Face's conv_states): slot out_slots[i]
  // gets the window of row out_rows[i]; out: out [R, Cd].
  virtual absl::Status SsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                                   const SsmTreeBatch& batch, Tensor* states, Tensor* out) = 0;
  // The Mamba-2 selective scan along each row's root path. Per head h with
  // group g(h), row r with parent state s (the committed state for a root):
  //   dt = clamp(softplus(dt_raw[r, h] + dt_bias[h]), dt_min, dt_max),
  //   state_r[h, p, n] = exp(dt·A[h])·s[h, p, n] + dt·x[r, h, p]·B[r, g, n],
  //   y[r, h, p] = Σ_n C[r, g, n]·state_r[h, p, n] + D[h]·x[r, h, p].
  // in: xbc [R, H·P + 2·G·N] (x | B | C, the conv output), dt_raw [R, H],
  //     A [H] f32 (= -exp(A_log)), dt_bias [H] f32, D [H] f32;
  // inout: states [S, H, P, N] f32: slot out_slots[i] gets state_{out_rows[i]};
  // out: y [R, H·P], or null for the states alone (activation replay).
  virtual absl::Status SsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                                   const Tensor& dt_bias, const Tensor& D,
                                   const SsmScanParams& params, const SsmTreeBatch& batch,
                                   Tensor* states, Tensor* y) = 0;
  // First half of Mamba-2's gated RMSNorm (MambaRMSNormGated, norm after
  // the gate), split so that tensor parallelism can sum `ss` over ranks.
  // in: y, z [R, W]; out: g [R, W] = y·silu(z) (may alias y),
  //     ss [R, W / group] f32 = Σ g² over each run of `group` columns.
  virtual absl::Status GateSumSquares(const Tensor& y, const Tensor& z, int64_t group, Tensor* g,
                                      Tensor* ss) = 0;
  // Second half: in: g [R, W], ss [R, W / group] (sums over `count` values
  // each, count >= group), w [W]; out: out [R, W] = w·g / sqrt(ss / count + eps)
  // with group = W / ss.dim(1). out may alias g.
  virtual absl::Status GroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w,
                                     int64_t count, float eps, Tensor* out) = 0;

  // ---- sampling math on the device -------------------------------------------
  // in: logits [R, V]; out: ids [R] on the host, the argmax of each row (lowest
  // index among equal maxima).
  virtual absl::Status ArgmaxRows(const Tensor& logits, std::vector<int32_t>* ids) = 0;
  // in: logits [R, V]; out: probs [R, V] f32 on the device: softmax(logits /
  // temperature) restricted to the top_k largest (0 = all), then to the
  // smallest prefix (by descending probability, ties by id) whose mass reaches
  // top_p, renormalised. temperature > 0. Same result as ProcessLogits in
  // core/spec/sampling.h.
  virtual absl::Status ProcessLogitsRows(const Tensor& logits, float temperature, int top_k,
                                         float top_p, Tensor* probs) = 0;

  // ---- graphs ------------------------------------------------------------------
  // Records the ops `body` issues (which must not Alloc or touch the host) so
  // ReplayGraph can re-issue them with one launch (CUDA graphs; paper 000
  // Sec. 4.1's graph cache). Backends without graphs return UNIMPLEMENTED and
  // callers run `body` directly.
  virtual absl::StatusOr<int> CaptureGraph(const std::function<absl::Status()>& body) {
    return absl::UnimplementedError(name() + " backend has no graphs");
  }
  virtual absl::Status ReplayGraph(int graph_id) {
    return absl::UnimplementedError(name() + " backend has no graphs");
  }
};

// How the CPU backend keeps weight matrices (activations are always f32):
// kF32 converts every matrix to f32; kF16 / kBF16 convert them to that type;
// kAuto keeps each as stored when the CPU kernels take it (f32, f16, bf16,
// q8_0, q4_0, q4_1) and converts the rest to f32.
enum class CpuWeights { kF32, kF16, kBF16, kAuto };

// The CPU backend (f32 activations). Always available. `threads` > 1 lets
// large matrix products and attention use that many OpenMP threads.
std::unique_ptr<Backend> CreateCpuBackend(int threads = 1, CpuWeights weights = CpuWeights::kF32);
// The CUDA backend on `device_index` with fp16 or bf16 storage. Returns
// UNAVAILABLE when treespec was built without CUDA or no GPU is present.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index, DType dtype);
// "cpu", "cpu:N" (N threads), optionally ":f32" (default), ":f16", ":bf16" or
// ":auto" (CpuWeights); "cuda", "cuda:1", optionally with ":bf16"/":f16"
// (default f16 on CUDA).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& spec);

}  // namespace treespec
