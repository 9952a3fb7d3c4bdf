// The CPU backend: float32 activations; weight matrices in f32, f16, bf16 or
// ggml quantised blocks (CpuWeights, kernels/cpu/linear_typed.cc); plain
// loops (kernels/cpu) for the rest. Always built; the reference every other
// backend is tested against.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/spec/sampling.h"
#include "core/tensor/backend.h"
#include "core/util/status_macros.h"
#include "kernels/cpu/attention_ops.h"
#include "kernels/cpu/cpu_backend_ssm.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/mamba_ops.h"
#include "kernels/cpu/quant_blocks.h"

namespace treespec {
namespace {

absl::Status CheckF32(const Tensor& t, const char* what) {
  if (t.device() != DeviceKind::kCpu || t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: ", what, " must be f32 on cpu, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// A weight matrix dtype the CPU kernels (Linear, Embedding) take.
bool IsCpuWeight(DType d) { return IsFloat(d) || IsQuantized(d); }

absl::Status CheckWeight(const Tensor& t, const char* what) {
  if (t.device() != DeviceKind::kCpu || !IsCpuWeight(t.dtype()) || t.rank() != 2 ||
      t.dim(1) % DTypeBlockSize(t.dtype()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend: ", what, " must be a [N, K] f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
        "q4_k, q5_k or q6_k matrix "
        "on cpu, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

// Elements [i, i + m) of `src` (float or quantised; i, m whole blocks) as f32.
void ChunkToF32(const void* src, DType dtype, size_t i, size_t m, float* out) {
  const char* base = static_cast<const char*>(src) + DTypeBytes(dtype, static_cast<int64_t>(i));
  if (IsFloat(dtype)) {
    ConvertToF32(base, dtype, m, out);
    return;
  }
  const size_t bs = static_cast<size_t>(DTypeBlockSize(dtype));
  const size_t bb = DTypeBytes(dtype, static_cast<int64_t>(bs));
  for (size_t k = 0; k < m; k += bs) {
    cpu::DecodeBlock(dtype, reinterpret_cast<const uint8_t*>(base) + (k / bs) * bb, out + k);
  }
}

int64_t RowSize(const Tensor& t) {
  int64_t n = 1;
  for (int i = 1; i < t.rank(); ++i) n *= t.dim(i);
  return n;
}

// Bytes of the tensors Alloc handed out that are still alive, and the most
// at once since the last reset. Shared with the tensors' deleters, which may
// run on any thread and after the backend is gone.
struct AllocCounter {
  std::atomic<int64_t> in_use{0}, peak{0};
  void Add(int64_t n) {
    const int64_t now = in_use.fetch_add(n) + n;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, CpuWeights weights) : threads_(threads), weights_(weights) {}
  DeviceKind device() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "cpu"; }
  int threads() const { return threads_; }
  DType activation_dtype() const override { return DType::kF32; }
  DType WeightDType(DType stored) const override {
    switch (weights_) {
      case CpuWeights::kF16: return DType::kF16;
      case CpuWeights::kBF16: return DType::kBF16;
      case CpuWeights::kAuto: return IsCpuWeight(stored) ? stored : DType::kF32;
      case CpuWeights::kF32: break;
    }
    return DType::kF32;
  }
  // Q4_0, Q5_0 and Q8_0 parts fuse as Q8_0 (converted exactly in Upload).
  DType FusedWeightDType(DType a, DType b) const override {
    if (a == b) return a;
    if (cpu::ConvertsToQ8_0(a) && cpu::ConvertsToQ8_0(b)) return DType::kQ8_0;
    return WeightDType(DType::kF32);
  }
  bool TakesMixedRowBlocks() const override { return true; }
  bool CanAliasHost(DType dtype) const override { return IsCpuWeight(dtype); }

  absl::StatusOr<Tensor> Alloc(DType dtype, Shape shape) override {
    Tensor t = Tensor::Host(dtype, std::move(shape));
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    counter_->Add(bytes);
    // The returned tensor's storage keeps `t` (and so the memory) alive and
    // counts the bytes out when the last view of it dies.
    std::shared_ptr<void> counted(t.raw(), [t, counter = counter_, bytes](void*) {
      counter->in_use.fetch_sub(bytes);
    });
    return Tensor(t.dtype(), t.shape(), DeviceKind::kCpu, std::move(counted), t.raw());
  }
  BackendMemoryStats memory_stats() const override {
    return {counter_->in_use.load(), counter_->peak.load()};
  }
  void ResetPeakMemory() override { counter_->peak.store(counter_->in_use.load()); }

  absl::Status Upload(const void* src, DType src_dtype, Tensor* dst) override {
    size_t n = static_cast<size_t>(dst->numel());
    if (src_dtype != dst->dtype() && IsQuantized(src_dtype) &&
        n % DTypeBlockSize(src_dtype) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu backend: ", n, " elements of ", DTypeName(src_dtype), " are not whole blocks"));
    }
    if (dst->dtype() == DType::kF32) {
      if (!IsCpuWeight(src_dtype)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cpu backend: cannot convert ", DTypeName(src_dtype), " to f32"));
      }
      ChunkToF32(src, src_dtype, 0, n, dst->data<float>());
      return absl::OkStatus();
    }
    if ((dst->dtype() == DType::kF16 || dst->dtype() == DType::kBF16) &&
        src_dtype != dst->dtype() && IsCpuWeight(src_dtype)) {
      // f32 / f16 / bf16 / quantised -> f16 or bf16 through f32, in chunks.
      const bool half = dst->dtype() == DType::kF16;
      uint16_t* out = dst->data<uint16_t>();
      std::vector<float> f32(std::min<size_t>(n, 1 << 16));
      for (size_t i = 0; i < n; i += f32.size()) {
        const size_t m = std::min(f32.size(), n - i);
        ChunkToF32(src, src_dtype, i, m, f32.data());
        for (size_t j = 0; j < m; ++j) out[i + j] = half ? FloatToHalf(f32[j]) : FloatToBF16(f32[j]);
      }
      return absl::OkStatus();
    }
    if (dst->dtype() == DType::kQ8_0 && src_dtype != DType::kQ8_0 &&
        cpu::ConvertsToQ8_0(src_dtype)) {
      const size_t bb = DTypeBytes(src_dtype, 32);
      const uint8_t* in = static_cast<const uint8_t*>(src);
      uint8_t* out = static_cast<uint8_t*>(dst->raw());
      for (size_t b = 0; b < n / 32; ++b) cpu::ToQ8_0Block(src_dtype, in + b * bb, out + b * 34);
      return absl::OkStatus();
    }
    if (dst->dtype() != src_dtype) {
      return absl::InvalidArgumentError(absl::StrCat("cpu backend: cannot convert ",
                                                     DTypeName(src_dtype), " to ",
                                                     DTypeName(dst->dtype())));
    }
    if (dst->nbytes() > 0) std::memcpy(dst->raw(), src, dst->nbytes());
    return absl::OkStatus();
  }

  absl::Status DownloadF32(const Tensor& src, float* dst) override {
    if (src.dtype() == DType::kI32) {
      const int32_t* s = src.data<int32_t>();
      for (int64_t i = 0; i < src.numel(); ++i) dst[i] = static_cast<float>(s[i]);
      return absl::OkStatus();
    }
    ConvertToF32(src.raw(), src.dtype(), static_cast<size_t>(src.numel()), dst);
    return absl::OkStatus();
  }

  absl::Status Zero(Tensor* t) override {
    std::memset(t->raw(), 0, t->nbytes());
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status FillUniform(Tensor* t, uint64_t seed, float scale) override {
    const DType dtype = t->dtype();
    if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu backend: FillUniform needs a float tensor, got ", t->DebugString()));
    }
    const int64_t n = t->numel();
    const int threads = static_cast<int>(std::min<int64_t>(16, 1 + n / (1 << 20)));
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([=] {
        for (int64_t i = k; i < n; i += threads) {
          const float v = FillUniformValue(seed, i, scale);
          if (dtype == DType::kF32) {
            t->data<float>()[i] = v;
          } else if (dtype == DType::kF16) {
            t->data<uint16_t>()[i] = FloatToHalf(v);
          } else {
            t->data<uint16_t>()[i] = FloatToBF16(v);
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    return absl::OkStatus();
  }

  absl::Status Embedding(const Tensor& ids, const Tensor& table, Tensor* out) override {
    if (table.dtype() == DType::kF32) {
      cpu::Embedding(ids.data<int32_t>(), static_cast<int>(ids.numel()), table.data<float>(),
                     static_cast<int>(table.dim(1)), out->data<float>());
      return absl::OkStatus();
    }
    TS_RETURN_IF_ERROR(CheckWeight(table, "embedding table"));
    const int D = static_cast<int>(table.dim(1));
    for (int64_t t = 0; t < ids.numel(); ++t) {
      cpu::DecodeRow(table.dtype(), table.raw(), ids.data<int32_t>()[t], D,
                     out->data<float>() + t * D);
    }
    return absl::OkStatus();
  }

  absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor* out) override {
    TS_RETURN_IF_ERROR(CheckF32(x, "rmsnorm input"));
    int D = static_cast<int>(w.numel());
    cpu::RmsNorm(x.data<float>(), w.data<float>(), static_cast<int>(x.numel() / D), D, eps,
                 out->data<float>());
    return absl::OkStatus();
  }

  absl::Status Linear(const Tensor& x, const Tensor& w, Tensor* out) override {
    TS_RETURN_IF_ERROR(CheckF32(x, "linear input"));
    TS_RETURN_IF_ERROR(CheckWeight(w, "linear weight"));
    const int K = static_cast<int>(w.dim(1));
    const int N = static_cast<int>(w.dim(0));
    if (RowSize(x) != K || RowSize(*out) != N || out->dim(0) != x.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat("cpu backend: linear shapes x ",
                                                     x.DebugString(), " w ", w.DebugString(),
                                                     " out ", out->DebugString()));
    }
    cpu::LinearTyped(x.data<float>(), w.raw(), w.dtype(), static_cast<int>(x.dim(0)), K, N,
                     out->data<float>(), threads_);
    return absl::OkStatus();
  }

  // Each block's columns are LinearTyped products of their own, so results
  // stay independent of T (and of the threads) as Linear's are. One row (a
  // decode step) is one parallel pass over all blocks' columns, written in
  // place; more rows take a product per block through a scratch [T, N_i].
  absl::Status LinearRowBlocks(const Tensor& x, const RowBlocks& w, Tensor* out) override {
    if (w.size() == 1) return Linear(x, w[0], out);
    TS_RETURN_IF_ERROR(CheckF32(x, "linear input"));
    const int64_t T = x.dim(0), K = RowSize(x);
    int64_t N = 0, widest = 0;
    for (const Tensor& b : w) {
      TS_RETURN_IF_ERROR(CheckWeight(b, "linear weight block"));
      if (b.rank() != 2 || b.dim(1) != K) {
        return absl::InvalidArgumentError(absl::StrCat("cpu backend: linear x ", x.DebugString(),
                                                       " against weight block ",
                                                       b.DebugString()));
      }
      N += b.dim(0);
      widest = std::max(widest, b.dim(0));
    }
    if (w.empty() || RowSize(*out) != N || out->dim(0) != T) {
      return absl::InvalidArgumentError(absl::StrCat("cpu backend: linear x ", x.DebugString(),
                                                     " over ", w.size(), " row blocks of ", N,
                                                     " rows, out ", out->DebugString()));
    }
    float* o = out->data<float>();
    if (T == 1) {
      cpu::ColumnChunks(1, static_cast<int>(K), static_cast<int>(N), threads_, [&](int n0, int n1) {
        int64_t at = 0;
        for (const Tensor& b : w) {
          const int64_t lo = std::max<int64_t>(n0, at), hi = std::min<int64_t>(n1, at + b.dim(0));
          if (lo < hi) {
            const auto* rows =
                static_cast<const uint8_t*>(b.raw()) + DTypeBytes(b.dtype(), (lo - at) * K);
            cpu::LinearTyped(x.data<float>(), rows, b.dtype(), 1, static_cast<int>(K),
                             static_cast<int>(hi - lo), o + lo, 1);
          }
          at += b.dim(0);
        }
      });
      return absl::OkStatus();
    }
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(T * widest));
    int64_t at = 0;
    for (const Tensor& b : w) {
      const int64_t n = b.dim(0);
      cpu::LinearTyped(x.data<float>(), b.raw(), b.dtype(), static_cast<int>(T),
                       static_cast<int>(K), static_cast<int>(n), scratch.data(), threads_);
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(o + t * N + at, scratch.data() + t * n, static_cast<size_t>(n) * sizeof(float));
      }
      at += n;
    }
    cpu::TrimScratch(&scratch);
    return absl::OkStatus();
  }

  absl::Status Add(const Tensor& a, const Tensor& b, Tensor* out) override {
    cpu::Add(a.data<float>(), b.data<float>(), a.numel(), out->data<float>());
    return absl::OkStatus();
  }

  absl::Status AddBias(Tensor* x, const Tensor& bias) override {
    TS_RETURN_IF_ERROR(CheckF32(*x, "add_bias x"));
    const int64_t N = bias.numel();
    if (x->rank() < 1 || RowSize(*x) != N) {
      return absl::InvalidArgumentError(absl::StrCat("cpu backend: add_bias shapes x ",
                                                     x->DebugString(), " bias ",
                                                     bias.DebugString()));
    }
    cpu::AddBias(x->data<float>(), bias.data<float>(), static_cast<int>(x->dim(0)),
                 static_cast<int>(N));
    return absl::OkStatus();
  }

  absl::Status HeadRmsNorm(Tensor* x, const Tensor& w, int64_t head_begin, int64_t num_heads,
                           float eps) override {
    TS_RETURN_IF_ERROR(CheckF32(*x, "head_rmsnorm x"));
    const int64_t Dh = w.numel();
    if (x->rank() < 1 || Dh == 0 || RowSize(*x) % Dh != 0 || head_begin < 0 || num_heads < 0 ||
        (head_begin + num_heads) * Dh > RowSize(*x)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu backend: head_rmsnorm x ", x->DebugString(), " w ", w.DebugString(), " heads [",
          head_begin, ", ", head_begin + num_heads, ")"));
    }
    cpu::HeadRmsNorm(x->data<float>(), w.data<float>(), static_cast<int>(x->dim(0)),
                     static_cast<int>(RowSize(*x)), static_cast<int>(Dh),
                     static_cast<int>(head_begin), static_cast<int>(num_heads), eps);
    return absl::OkStatus();
  }

  absl::Status SiluMul(const Tensor& gu, Tensor* out) override {
    cpu::SiluMul(gu.data<float>(), static_cast<int>(gu.dim(0)), static_cast<int>(gu.dim(1) / 2),
                 out->data<float>());
    return absl::OkStatus();
  }

  absl::Status SliceCols(const Tensor& x, int64_t begin, Tensor* out) override {
    const int64_t W = x.dim(1), n = out->dim(1);
    if (begin < 0 || begin + n > W) {
      return absl::InvalidArgumentError("cpu backend: SliceCols out of range");
    }
    for (int64_t t = 0; t < x.dim(0); ++t) {
      std::memcpy(out->data<float>() + t * n, x.data<float>() + t * W + begin,
                  sizeof(float) * n);
    }
    return absl::OkStatus();
  }

  absl::Status GatherRows(const Tensor& x, const std::vector<int32_t>& rows,
                          Tensor* out) override {
    const int64_t row = RowSize(x);
    const size_t bytes = row * DTypeSize(x.dtype());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= x.dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat("GatherRows: row ", rows[i]));
      }
      std::memcpy(static_cast<char*>(out->raw()) + i * bytes,
                  static_cast<const char*>(x.raw()) + rows[i] * bytes, bytes);
    }
    return absl::OkStatus();
  }

  absl::Status CopyRows(Tensor* pool, const std::vector<int32_t>& src,
                        const std::vector<int32_t>& dst) override {
    const size_t bytes = RowSize(*pool) * DTypeSize(pool->dtype());
    char* base = static_cast<char*>(pool->raw());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == dst[i]) continue;
      std::memmove(base + dst[i] * bytes, base + src[i] * bytes, bytes);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<AttentionPlan>> PlanAttention(
      const AttentionBatch& batch) override {
    return std::make_unique<AttentionPlan>(batch);
  }

  absl::Status QkvRope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                       const AttentionPlan& plan, Tensor* q, Tensor* k_cache,
                       Tensor* v_cache) override {
    const int H = static_cast<int>(q->dim(1)), Dh = static_cast<int>(q->dim(2));
    const int Hkv = static_cast<int>(k_cache->dim(1));
    const int rot_half = static_cast<int>(inv_freq.numel());
    if (rot_half > Dh / 2) {
      return absl::InvalidArgumentError(absl::StrCat("cpu backend: QkvRope inv_freq ",
                                                     inv_freq.DebugString(), " for head dim ", Dh));
    }
    cpu::QkvRope(qkv.data<float>(), positions.data<int32_t>(), inv_freq.data<float>(), rot_half,
                 plan.batch(), H, Hkv, Dh, q->data<float>(), k_cache->data<float>(),
                 v_cache->data<float>());
    return absl::OkStatus();
  }

  absl::Status Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionPlan& plan, float scale, Tensor* out) override {
    const int H = static_cast<int>(q.dim(1)), Dh = static_cast<int>(q.dim(2));
    const int Hkv = static_cast<int>(k_cache.dim(1));
    cpu::Attention(q.data<float>(), k_cache.data<float>(), v_cache.data<float>(), plan.batch(),
                   H, Hkv, Dh, scale, out->data<float>(), threads_);
    return absl::OkStatus();
  }

  absl::Status MambaConv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* state,
                         Tensor* out) override {
    cpu::MambaConv(x.data<float>(), static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)),
                   w.data<float>(), b.data<float>(), static_cast<int>(w.dim(1)),
                   state->data<float>(), out->data<float>());
    return absl::OkStatus();
  }

  absl::Status MambaConvBatch(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& slots, Tensor* states, Tensor* out) override {
    const int C = static_cast<int>(x.dim(1)), K = static_cast<int>(w.dim(1));
    for (int64_t i = 0; i < x.dim(0); ++i) {
      int32_t slot = slots.data<int32_t>()[i];
      cpu::MambaConv(x.data<float>() + i * C, 1, C, w.data<float>(), b.data<float>(), K,
                     states->data<float>() + static_cast<int64_t>(slot) * C * K,
                     out->data<float>() + i * C);
    }
    return absl::OkStatus();
  }

  absl::Status MambaScan(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                         const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                         const Tensor& z, Tensor* state, Tensor* y) override {
    cpu::MambaScan(u.data<float>(), delta.data<float>(), dt_bias.data<float>(), A.data<float>(),
                   Bm.data<float>(),
                   Cm.data<float>(), D.data<float>(), z.data<float>(),
                   static_cast<int>(u.dim(0)), static_cast<int>(u.dim(1)),
                   static_cast<int>(A.dim(1)), state->data<float>(), y->data<float>());
    return absl::OkStatus();
  }

  absl::Status MambaScanBatch(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                              const Tensor& A, const Tensor& Bm, const Tensor& Cm,
                              const Tensor& D, const Tensor& z, const Tensor& slots,
                              Tensor* states, Tensor* y) override {
    const int C = static_cast<int>(u.dim(1)), N = static_cast<int>(A.dim(1));
    for (int64_t i = 0; i < u.dim(0); ++i) {
      int32_t slot = slots.data<int32_t>()[i];
      cpu::MambaScan(u.data<float>() + i * C, delta.data<float>() + i * C,
                     dt_bias.data<float>(), A.data<float>(),
                     Bm.data<float>() + i * N, Cm.data<float>() + i * N, D.data<float>(),
                     z.data<float>() + i * C, 1, C, N,
                     states->data<float>() + static_cast<int64_t>(slot) * C * N,
                     y->data<float>() + i * C);
    }
    return absl::OkStatus();
  }

  absl::Status SsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                           const SsmTreeBatch& batch, Tensor* states, Tensor* out) override {
    return cpu::CheckedSsmTreeConv(x, w, b, batch, states, out);
  }

  absl::Status SsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                           const Tensor& dt_bias, const Tensor& D, const SsmScanParams& params,
                           const SsmTreeBatch& batch, Tensor* states, Tensor* y) override {
    return cpu::CheckedSsmTreeScan(xbc, dt_raw, A, dt_bias, D, params, batch, states, y, threads_);
  }

  absl::Status GateSumSquares(const Tensor& y, const Tensor& z, int64_t group, Tensor* g,
                              Tensor* ss) override {
    return cpu::CheckedGateSumSquares(y, z, group, g, ss);
  }

  absl::Status GroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w, int64_t count,
                             float eps, Tensor* out) override {
    return cpu::CheckedGroupRmsScale(g, ss, w, count, eps, out);
  }

  absl::Status ArgmaxRows(const Tensor& logits, std::vector<int32_t>* ids) override {
    TS_RETURN_IF_ERROR(CheckF32(logits, "argmax input"));
    const int64_t R = logits.dim(0), V = logits.dim(1);
    ids->resize(R);
    for (int64_t r = 0; r < R; ++r) (*ids)[r] = Argmax(logits.data<float>() + r * V, V);
    return absl::OkStatus();
  }

  absl::Status ProcessLogitsRows(const Tensor& logits, float temperature, int top_k,
                                 float top_p, Tensor* probs) override {
    TS_RETURN_IF_ERROR(CheckF32(logits, "logits"));
    const int64_t R = logits.dim(0), V = logits.dim(1);
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    for (int64_t r = 0; r < R; ++r) {
      ProcessLogits(logits.data<float>() + r * V, V, params, probs->data<float>() + r * V);
    }
    return absl::OkStatus();
  }

 private:
  const int threads_;
  const CpuWeights weights_;
  std::shared_ptr<AllocCounter> counter_ = std::make_shared<AllocCounter>();
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int threads, CpuWeights weights) {
  return std::make_unique<CpuBackend>(std::max(1, threads), weights);
}

}  // namespace treespec
