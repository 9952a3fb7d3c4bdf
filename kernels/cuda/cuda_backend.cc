// CudaBackend set-up and tear-down, scratch memory and argument checks (the ops
// are in cuda_backend_*.cc; see cuda_backend_impl.h), and CreateCudaBackend.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_backend_impl.h"

namespace treespec {
namespace cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace

absl::Status Check(const Tensor& t, DType dtype, const char* what) {
  if (t.device() != DeviceKind::kCuda || t.dtype() != dtype || !t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: ", what, " must be ", DTypeName(dtype), " on cuda, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status ShapeError(const char* op, std::initializer_list<const Tensor*> ts) {
  std::string msg = absl::StrCat("cuda backend: ", op, ": bad shapes");
  for (const Tensor* t : ts) absl::StrAppend(&msg, " ", t->DebugString());
  return absl::InvalidArgumentError(msg);
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cublas_workspace_ = Tensor();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaBackend::Init() {
  TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaDeviceProp prop;
  TS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_));
  num_sms_ = prop.multiProcessorCount;
  max_smem_optin_ = static_cast<int>(prop.sharedMemPerBlockOptin);
  device_name_ = prop.name;
  // TREESPEC_CUDA_SKINNY_ROWS=0 sends every product to cuBLAS (for A/B runs).
  if (const char* rows = std::getenv("TREESPEC_CUDA_SKINNY_ROWS"); rows != nullptr) {
    skinny_max_rows_ = std::clamp(std::atoi(rows), 0, kSkinnyMaxRows);
  }
  allocator_ = DeviceAllocator::Create(device_);
  TS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TS_CUDA_RETURN_IF_ERROR(cublasCreate(&cublas_));
  TS_CUDA_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  // A fixed workspace keeps cuBLAS from allocating inside graph capture.
  TS_ASSIGN_OR_RETURN(cublas_workspace_,
                      Scratch(DType::kU8, {static_cast<int64_t>(kCublasWorkspaceBytes)}));
  TS_CUDA_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_, cublas_workspace_.raw(), kCublasWorkspaceBytes));
  return Synchronize();
}

absl::Status CudaBackend::Enter(const char* op) {
  if (capturing_) {
    if (op == nullptr) return absl::OkStatus();  // the capturing thread's device is current
    return absl::FailedPreconditionError(
        absl::StrCat("cuda backend: ", op, " is not allowed while capturing a graph"));
  }
  TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CudaBackend::Scratch(DType dtype, Shape shape) {
  TS_RETURN_IF_ERROR(Enter("Alloc"));
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("Alloc: negative dim in ", ShapeString(shape)));
    n *= d;
  }
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(n) * DTypeSize(dtype));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<void> storage, allocator_->Allocate(bytes));
  void* p = storage.get();
  return Tensor(dtype, std::move(shape), DeviceKind::kCuda, std::move(storage), p);
}

absl::StatusOr<Tensor> CudaBackend::UploadIndex(const std::vector<int32_t>& host) {
  TS_ASSIGN_OR_RETURN(Tensor t, Scratch(DType::kI32, {static_cast<int64_t>(host.size())}));
  if (!host.empty()) {
    // Pageable source: the call returns once `host` is staged, so it may go.
    TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.raw(), host.data(), host.size() * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream_));
  }
  return t;
}

absl::StatusOr<const CudaAttentionPlan*> CudaBackend::Plan(const AttentionPlan& plan) {
  const auto* p = dynamic_cast<const CudaAttentionPlan*>(&plan);
  if (p == nullptr) {
    return absl::InvalidArgumentError("cuda backend: attention plan from another backend");
  }
  return p;
}

absl::Status CudaBackend::CheckAll(std::initializer_list<const Tensor*> ts, const char* what) {
  for (const Tensor* t : ts) TS_RETURN_IF_ERROR(Check(*t, dtype_, what));
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckAllF32(std::initializer_list<const Tensor*> ts, const char* what) {
  for (const Tensor* t : ts) TS_RETURN_IF_ERROR(Check(*t, DType::kF32, what));
  return absl::OkStatus();
}

cudaStream_t StreamOf(Backend* backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  return cuda == nullptr ? nullptr : cuda->stream();
}

int SetSkinnyMaxRows(Backend* backend, int rows) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  if (cuda == nullptr) return -1;
  const int before = cuda->skinny_max_rows();
  cuda->set_skinny_max_rows(std::clamp(rows, 0, kSkinnyMaxRows));
  return before;
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
    return absl::UnavailableError(
        absl::StrCat("no CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(err), " (",
                     cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: cudaGetDeviceCount() == 0");
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: cuda:", device_index, " does not exist (", count, " devices)"));
  }
  auto backend = std::make_unique<cuda::CudaBackend>(device_index, dtype);
  TS_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace treespec
