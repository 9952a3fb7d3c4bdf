// CudaBackend: the CUDA implementation of Backend (made by CreateCudaBackend),
// declared here for the files that define its methods, one group per file:
//
//   cuda_backend.cc            set-up and tear-down, scratch memory, argument checks
//   cuda_backend_memory.cc     Alloc, Upload, DownloadF32, Zero, FillUniform, Synchronize
//   cuda_backend_dense.cc      Embedding, RmsNorm, HeadRmsNorm, Linear, Add, AddBias, SiluMul, SliceCols,
//                              GatherRows, CopyRows
//   cuda_backend_attention.cc  PlanAttention, QkvRope, Attention
//   cuda_backend_mamba.cc      MambaConv(Batch), MambaScan(Batch)
//   cuda_backend_ssm_tree.cc   the Mamba-2 tree ops: SsmTreeConv, SsmTreeScan,
//                              GateSumSquares, GroupRmsScale
//   cuda_backend_sampling.cc   ArgmaxRows, ProcessLogitsRows
//   cuda_backend_graphs.cc     CaptureGraph, ReplayGraph
//
// Every op checks shapes and dtypes, turns CUDA errors into Status and hands
// raw pointers to the per-op launchers in this directory, enqueued on the one
// stream. Internal to kernels/cuda; others use the Backend interface (or
// cuda_backend.h). Thread-compatible, like every Backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor/backend.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/skinny_linear.h"

namespace treespec::cuda {

inline int64_t RowSize(const Tensor& t) {
  int64_t n = 1;
  for (int i = 1; i < t.rank(); ++i) n *= t.dim(i);
  return n;
}

inline bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// INVALID_ARGUMENT unless `t` is a defined cuda tensor of `dtype`.
absl::Status Check(const Tensor& t, DType dtype, const char* what);
// INVALID_ARGUMENT "cuda backend: <op>: bad shapes" listing `ts`.
absl::Status ShapeError(const char* op, std::initializer_list<const Tensor*> ts);

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, DType dtype) : device_(device), dtype_(dtype) {}

  ~CudaBackend() override;

  // Selects the device, makes the stream, cuBLAS and its fixed workspace.
  absl::Status Init();

  cudaStream_t stream() const { return stream_; }
  void* NativeStream() override { return stream_; }
  // Products of at most this many rows use SkinnyLinear, larger ones cuBLAS.
  int skinny_max_rows() const { return skinny_max_rows_; }
  void set_skinny_max_rows(int rows) { skinny_max_rows_ = rows; }

  DeviceKind device() const override { return DeviceKind::kCuda; }
  std::string name() const override {
    return absl::StrCat("cuda:", device_, ":", DTypeName(dtype_), " (", device_name_, ")");
  }
  DType activation_dtype() const override { return dtype_; }

  // ---- memory (cuda_backend_memory.cc) -----------------------------------------------
  absl::StatusOr<Tensor> Alloc(DType dtype, Shape shape) override;
  absl::Status Upload(const void* src, DType src_dtype, Tensor* dst) override;
  absl::Status DownloadF32(const Tensor& src, float* dst) override;
  absl::Status Zero(Tensor* t) override;
  absl::Status FillUniform(Tensor* t, uint64_t seed, float scale) override;
  absl::Status Synchronize() override;
  BackendMemoryStats memory_stats() const override {
    const DeviceAllocator::Stats s = allocator_->stats();
    return {static_cast<int64_t>(s.in_use_bytes), static_cast<int64_t>(s.peak_in_use_bytes)};
  }
  void ResetPeakMemory() override { allocator_->ResetPeak(); }

  // ---- dense ops (cuda_backend_dense.cc) ---------------------------------------------
  absl::Status Embedding(const Tensor& ids, const Tensor& table, Tensor* out) override;
  absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor* out) override;
  absl::Status Linear(const Tensor& x, const Tensor& w, Tensor* out) override;
  absl::Status AddRmsNorm(Tensor* x, const Tensor& r, const Tensor& w, float eps,
                          Tensor* out) override;
  absl::Status Add(const Tensor& a, const Tensor& b, Tensor* out) override;
  absl::Status AddBias(Tensor* x, const Tensor& bias) override;
  absl::Status HeadRmsNorm(Tensor* x, const Tensor& w, int64_t head_begin, int64_t num_heads,
                           float eps) override;
  absl::Status SiluMul(const Tensor& gu, Tensor* out) override;
  absl::Status SliceCols(const Tensor& x, int64_t begin, Tensor* out) override;
  absl::Status GatherRows(const Tensor& x, const std::vector<int32_t>& rows, Tensor* out) override;
  absl::Status CopyRows(Tensor* pool, const std::vector<int32_t>& src,
                        const std::vector<int32_t>& dst) override;

  // ---- attention (cuda_backend_attention.cc) -----------------------------------------
  absl::StatusOr<std::unique_ptr<AttentionPlan>> PlanAttention(
      const AttentionBatch& batch) override;
  absl::Status QkvRope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                       const AttentionPlan& plan_base, Tensor* q, Tensor* k_cache,
                       Tensor* v_cache) override;
  absl::Status Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionPlan& plan_base, float scale, Tensor* out) override;

  // ---- Mamba (cuda_backend_mamba.cc) -------------------------------------------------
  absl::Status MambaConv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* state,
                         Tensor* out) override;
  absl::Status MambaConvBatch(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& slots, Tensor* states, Tensor* out) override;
  absl::Status MambaScan(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                         const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                         const Tensor& z, Tensor* state, Tensor* y) override;
  absl::Status MambaScanBatch(const Tensor& u, const Tensor& delta, const Tensor& dt_bias,
                              const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                              const Tensor& z, const Tensor& slots, Tensor* states,
                              Tensor* y) override;

  // ---- Mamba-2 tree ops (cuda_backend_ssm_tree.cc) -----------------------------------
  absl::Status SsmTreeConv(const Tensor& x, const Tensor& w, const Tensor& b,
                           const SsmTreeBatch& batch, Tensor* states, Tensor* out) override;
  absl::Status SsmTreeScan(const Tensor& xbc, const Tensor& dt_raw, const Tensor& A,
                           const Tensor& dt_bias, const Tensor& D, const SsmScanParams& params,
                           const SsmTreeBatch& batch, Tensor* states, Tensor* y) override;
  absl::Status GateSumSquares(const Tensor& y, const Tensor& z, int64_t group, Tensor* g,
                              Tensor* ss) override;
  absl::Status GroupRmsScale(const Tensor& g, const Tensor& ss, const Tensor& w, int64_t count,
                             float eps, Tensor* out) override;

  // ---- sampling (cuda_backend_sampling.cc) -------------------------------------------
  absl::Status ArgmaxRows(const Tensor& logits, std::vector<int32_t>* ids) override;
  absl::Status ProcessLogitsRows(const Tensor& logits, float temperature, int top_k, float top_p,
                                 Tensor* probs) override;

  // ---- graphs (cuda_backend_graphs.cc) -----------------------------------------------
  absl::StatusOr<int> CaptureGraph(const std::function<absl::Status()>& body) override;
  absl::Status ReplayGraph(int graph_id) override;

 private:
  // Makes the device current; ops that must not run inside a graph capture
  // (host transfers, allocation, synchronisation) name themselves in `op`.
  absl::Status Enter(const char* op);
  // Uninitialised device memory from the caching allocator.
  absl::StatusOr<Tensor> Scratch(DType dtype, Shape shape);
  absl::StatusOr<const CudaAttentionPlan*> Plan(const AttentionPlan& plan);
  absl::Status CheckAll(std::initializer_list<const Tensor*> ts, const char* what);
  absl::Status CheckAllF32(std::initializer_list<const Tensor*> ts, const char* what);
  // A device i32 copy of `host` (scratch; enqueued on the stream).
  absl::StatusOr<Tensor> UploadIndex(const std::vector<int32_t>& host);

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
  int skinny_max_rows_ = kSkinnyDefaultRows;
  std::vector<cudaGraphExec_t> graphs_;
};

}  // namespace treespec::cuda
