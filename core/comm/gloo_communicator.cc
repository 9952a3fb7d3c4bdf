#include "core/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <exception>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/comm_accounting.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo throws; this module's boundary turns every exception into a Status.
// Timeouts (Gloo says "Timed out") are DEADLINE_EXCEEDED, everything else
// (closed connections, I/O errors) UNAVAILABLE.
absl::Status GlooError(const std::exception& e, const char* expr, const char* file, int line) {
  const std::string what = e.what();
  const std::string msg = absl::StrCat("gloo: ", expr, " failed at ", file, ":", line, ": ", what);
  if (absl::StrContains(what, "Timed out") || absl::StrContains(what, "timed out")) {
    return absl::DeadlineExceededError(msg);
  }
  return absl::UnavailableError(msg);
}

#define TS_GLOO_RETURN_IF_ERROR(expr)                                         \
  do {                                                                        \
    try {                                                                     \
      expr;                                                                   \
    } catch (const std::exception& ts_gloo_e_) {                              \
      return ::treespec::GlooError(ts_gloo_e_, #expr, __FILE__, __LINE__);    \
    }                                                                         \
  } while (0)

// Gloo's view of the rendezvous store, under a key prefix. Gloo expects
// exceptions from its store; they are caught by TS_GLOO_RETURN_IF_ERROR.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousClient* client, std::string prefix, std::chrono::milliseconds timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status st = client_->Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw gloo::IoException(std::string(st.message()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = Get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    for (const std::string& k : keys) Get(k, t.count() > 0 ? t : timeout_);
  }

 private:
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) {
    absl::StatusOr<std::string> v = client_->Get(prefix_ + key, timeout);
    if (v.ok()) return *v;
    if (v.status().code() == absl::StatusCode::kDeadlineExceeded) {
      // Gloo's keys are the ranks' numbers.
      throw gloo::IoException(absl::StrCat("Timed out after ", timeout.count(),
                                           " ms waiting for rank ", key,
                                           " to join the group (key '", prefix_, key, "')"));
    }
    throw gloo::IoException(std::string(v.status().message()));
  }

  RendezvousClient* client_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context, const GlooOptions& options)
      : context_(std::move(context)), options_(options) {}

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "gloo"; }

  absl::Status AllReduceSum(Tensor* t) override {
    TS_RETURN_IF_ERROR(CheckHostF32("AllReduceSum", *t));
    return Run(CollectiveOp::kAllReduce, t->nbytes(), [&]() -> absl::Status {
      if (t->numel() == 0) return absl::OkStatus();
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(t->data<float>(), static_cast<size_t>(t->numel()));
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTimeout(options_.comm.timeout);
      TS_GLOO_RETURN_IF_ERROR(gloo::allreduce(opts));
      return absl::OkStatus();
    });
  }

  absl::Status AllGather(const Tensor& in, Tensor* out) override {
    TS_RETURN_IF_ERROR(CheckHostF32("AllGather input", in));
    TS_RETURN_IF_ERROR(CheckHostF32("AllGather output", *out));
    if (out->numel() != in.numel() * options_.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllGather: output ", ShapeString(out->shape()), " is not ", options_.size,
                       " x input ", ShapeString(in.shape())));
    }
    return Run(CollectiveOp::kAllGather, in.nbytes(), [&]() -> absl::Status {
      if (in.numel() == 0) return absl::OkStatus();
      gloo::AllgatherOptions opts(context_);
      opts.setInput(in.data<float>(), static_cast<size_t>(in.numel()));
      opts.setOutput(out->data<float>(), static_cast<size_t>(out->numel()));
      opts.setTimeout(options_.comm.timeout);
      TS_GLOO_RETURN_IF_ERROR(gloo::allgather(opts));
      return absl::OkStatus();
    });
  }

  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= options_.size) {
      return absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root, " out of range"));
    }
    return Run(CollectiveOp::kBroadcast, bytes, [&]() -> absl::Status {
      if (bytes == 0) return absl::OkStatus();
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(data), bytes);
      opts.setRoot(root);
      opts.setTimeout(options_.comm.timeout);
      TS_GLOO_RETURN_IF_ERROR(gloo::broadcast(opts));
      return absl::OkStatus();
    });
  }

  absl::Status Barrier() override {
    return Run(CollectiveOp::kBarrier, 0, [&]() -> absl::Status {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(options_.comm.timeout);
      TS_GLOO_RETURN_IF_ERROR(gloo::barrier(opts));
      return absl::OkStatus();
    });
  }

  absl::Status status() const override { return accounting_.status(); }
  CommStats stats() const override { return accounting_.stats(); }
  void ResetStats() override { accounting_.ResetStats(); }

 private:
  static absl::Status CheckHostF32(const char* what, const Tensor& t) {
    if (t.device() != DeviceKind::kCpu || t.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("gloo ", what, ": needs an f32 host tensor, got ",
                                                     t.DebugString()));
    }
    return absl::OkStatus();
  }

  template <typename F>
  absl::Status Run(CollectiveOp op, size_t bytes, F&& body) {
    if (absl::Status st = accounting_.status(); !st.ok()) return st;
    const Clock::time_point t0 = Clock::now();
    absl::Status st = body();
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return accounting_.Record(op, bytes, ns, st);
  }

  const std::shared_ptr<gloo::rendezvous::Context> context_;
  const GlooOptions options_;
  CommAccounting accounting_{options_.rank, options_.size};
};

absl::Status Connect(const GlooOptions& options, RendezvousClient* store,
                     std::shared_ptr<gloo::rendezvous::Context>* out) {
  gloo::transport::tcp::attr attr;
  attr.hostname = options.host.empty() ? store->local_host() : options.host;
  std::shared_ptr<gloo::transport::Device> device;
  TS_GLOO_RETURN_IF_ERROR(device = gloo::transport::tcp::CreateDevice(attr));
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(options.connect_timeout);
  StoreAdapter adapter(store, options.prefix + "/", options.connect_timeout);
  TS_GLOO_RETURN_IF_ERROR(context->connectFullMesh(adapter, device));
  context->setTimeout(options.comm.timeout);
  *out = std::move(context);
  return absl::OkStatus();
}

}  // namespace

absl::Status GlooOptions::Validate() const {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is not in [0, size ", size, ")"));
  }
  if (connect_timeout.count() <= 0) return absl::InvalidArgumentError("gloo: connect timeout <= 0");
  return comm.Validate();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options,
                                                                     RendezvousClient* store) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::shared_ptr<gloo::rendezvous::Context> context;
  if (absl::Status st = Connect(options, store, &context); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("forming the Gloo group (rank ", options.rank,
                                                " of ", options.size, "): ", st.message()));
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(context), options));
}

}  // namespace treespec
