// NcclCommunicator: the Communicator over NCCL (see core/comm/nccl_communicator.h).
//
// The communicator is non-blocking (config.blocking = 0) so that the host
// never sits inside an NCCL call it cannot leave: every call is polled with
// ncclCommGetAsyncError, and every collective is followed by an event the
// host polls until it completes, the communicator reports an error, or the
// timeout passes, in which case the communicator is aborted. This costs one
// host synchronisation per collective; a watchdog thread could lift that
// later without changing the interface.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/nccl/nccl_check.h"
#include "core/comm/nccl_communicator.h"
#include "core/comm/comm_accounting.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: no reduction for dtype ", DTypeName(dtype)));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const NcclOptions& options) : options_(options) {}

  ~NcclCommunicator() override {
    cudaSetDevice(options_.device);
    if (comm_ != nullptr) {
      // A healthy communicator is finalized (flushing its work) and
      // destroyed; a failed one, or one whose finalize fails, is aborted.
      bool clean = status().ok();
      if (clean) {
        const ncclResult_t rc = ncclCommFinalize(comm_);
        deadline_ = Clock::now() + options_.comm.timeout;
        clean = (rc == ncclSuccess || rc == ncclInProgress) && PollAsync("ncclCommFinalize").ok();
      }
      if (clean) {
        ncclCommDestroy(comm_);
      } else if (!aborted_) {
        ncclCommAbort(comm_);
      }
    }
    if (stage_ != nullptr) cudaFree(stage_);
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (own_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    if (options_.unique_id.size() != sizeof(ncclUniqueId)) {
      return absl::InvalidArgumentError(absl::StrCat("nccl: unique id of ", options_.unique_id.size(),
                                                     " bytes; expected ", sizeof(ncclUniqueId)));
    }
    TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    stream_ = options_.backend != nullptr
                  ? static_cast<cudaStream_t>(options_.backend->NativeStream())
                  : nullptr;
    if (stream_ == nullptr) {
      TS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      own_stream_ = true;
    }
    TS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    ncclUniqueId id;
    std::memcpy(&id, options_.unique_id.data(), sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, options_.size, id, options_.rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      comm_ = nullptr;
      TS_CUDA_RETURN_IF_ERROR(rc);
    }
    deadline_ = Clock::now() + options_.init_timeout;
    return PollAsync("ncclCommInitRankConfig");
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "nccl"; }

  absl::Status AllReduceSum(Tensor* t) override {
    TS_RETURN_IF_ERROR(CheckDevice("AllReduceSum", *t));
    TS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t->dtype()));
    return Run(CollectiveOp::kAllReduce, t->nbytes(), [&] {
      return ncclAllReduce(t->raw(), t->raw(), static_cast<size_t>(t->numel()), type, ncclSum,
                           comm_, stream_);
    });
  }

  absl::Status AllGather(const Tensor& in, Tensor* out) override {
    TS_RETURN_IF_ERROR(CheckDevice("AllGather input", in));
    TS_RETURN_IF_ERROR(CheckDevice("AllGather output", *out));
    if (out->numel() != in.numel() * options_.size || out->dtype() != in.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("nccl AllGather: output ", out->DebugString(),
                                                     " is not ", options_.size, " x input ",
                                                     in.DebugString()));
    }
    TS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(in.dtype()));
    return Run(CollectiveOp::kAllGather, in.nbytes(), [&] {
      return ncclAllGather(in.raw(), out->raw(), static_cast<size_t>(in.numel()), type, comm_,
                           stream_);
    });
  }

  // Host bytes travel through a device staging buffer.
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= options_.size) {
      return absl::InvalidArgumentError(absl::StrCat("nccl Broadcast: root ", root, " out of range"));
    }
    if (bytes == 0) return absl::OkStatus();
    TS_RETURN_IF_ERROR(Stage(bytes));
    if (options_.rank == root) {
      TS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(stage_, data, bytes, cudaMemcpyHostToDevice, stream_));
    }
    TS_RETURN_IF_ERROR(Run(CollectiveOp::kBroadcast, bytes, [&] {
      return ncclBroadcast(stage_, stage_, bytes, ncclUint8, root, comm_, stream_);
    }));
    TS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, stage_, bytes, cudaMemcpyDeviceToHost, stream_));
    TS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    TS_RETURN_IF_ERROR(Stage(sizeof(int32_t)));
    return Run(CollectiveOp::kBarrier, 0, [&] {
      return ncclAllReduce(stage_, stage_, 1, ncclInt32, ncclSum, comm_, stream_);
    });
  }

  absl::Status status() const override { return accounting_.status(); }
  CommStats stats() const override { return accounting_.stats(); }
  void ResetStats() override { accounting_.ResetStats(); }

 private:
  static absl::Status CheckDevice(const char* what, const Tensor& t) {
    if (t.device() != DeviceKind::kCuda) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl ", what, ": needs a CUDA tensor, got ", t.DebugString()));
    }
    return absl::OkStatus();
  }

  absl::Status Stage(size_t bytes) {
    if (stage_bytes_ >= bytes) return absl::OkStatus();
    if (stage_ != nullptr) TS_CUDA_RETURN_IF_ERROR(cudaFree(stage_));
    stage_ = nullptr;
    TS_CUDA_RETURN_IF_ERROR(cudaMalloc(&stage_, bytes));
    stage_bytes_ = bytes;
    return absl::OkStatus();
  }

  // Polls the communicator until its pending call finishes (or deadline_).
  absl::Status PollAsync(const char* what) {
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
      if (rc != ncclSuccess) return Abort(cuda::ToStatus(rc, "ncclCommGetAsyncError", __FILE__, __LINE__));
      if (async == ncclSuccess) return absl::OkStatus();
      if (async != ncclInProgress) return Abort(cuda::ToStatus(async, what, __FILE__, __LINE__));
      if (Clock::now() > deadline_) return Timeout(what);
      std::this_thread::yield();
    }
  }

  // Waits for the work enqueued on stream_ so far, watching for NCCL errors.
  absl::Status WaitStream(const char* what) {
    TS_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream_));
    int spins = 0;
    while (true) {
      cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return Abort(cuda::ToStatus(e, what, __FILE__, __LINE__));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Abort(cuda::ToStatus(async, what, __FILE__, __LINE__));
      }
      if (Clock::now() > deadline_) return Timeout(what);
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  absl::Status Timeout(const char* what) {
    return Abort(absl::DeadlineExceededError(
        absl::StrCat("nccl: ", what, " did not complete within ", options_.comm.timeout.count(),
                     " ms (a peer rank is gone or stuck); communicator aborted")));
  }

  absl::Status Abort(absl::Status st) {
    if (!aborted_ && comm_ != nullptr) ncclCommAbort(comm_);
    aborted_ = true;
    return accounting_.Fail(st);
  }

  template <typename F>
  absl::Status Run(CollectiveOp op, size_t bytes, F&& issue) {
    if (absl::Status st = status(); !st.ok()) return st;
    const Clock::time_point t0 = Clock::now();
    deadline_ = t0 + options_.comm.timeout;
    absl::Status st = [&]() -> absl::Status {
      TS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
      ncclResult_t rc = issue();
      if (rc != ncclSuccess && rc != ncclInProgress) {
        return Abort(cuda::ToStatus(rc, "nccl collective", __FILE__, __LINE__));
      }
      if (rc == ncclInProgress) TS_RETURN_IF_ERROR(PollAsync("nccl collective"));
      return WaitStream("nccl collective");
    }();
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return accounting_.Record(op, bytes, ns, st);
  }

  const NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  cudaEvent_t event_ = nullptr;
  void* stage_ = nullptr;
  size_t stage_bytes_ = 0;
  bool aborted_ = false;
  Clock::time_point deadline_;
  CommAccounting accounting_{options_.rank, options_.size};
};

}  // namespace

absl::StatusOr<std::string> CreateNcclUniqueId() {
  ncclUniqueId id;
  TS_CUDA_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank ", options.rank, " is not in [0, size ", options.size, ")"));
  }
  TS_RETURN_IF_ERROR(options.comm.Validate());
  auto comm = std::make_unique<NcclCommunicator>(options);
  TS_RETURN_IF_ERROR(comm->Init());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace treespec
