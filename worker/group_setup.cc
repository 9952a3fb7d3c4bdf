#include "worker/group_setup.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/nccl_communicator.h"
#include "core/util/status_macros.h"

namespace treespec {

using std::chrono::milliseconds;

absl::Status GroupOptions::Validate() const {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp-rank ", rank, " must be in [0, --tp-size ", size, ")"));
  }
  if (size < 2) return absl::InvalidArgumentError(absl::StrCat("--tp-size ", size, " must be >= 2"));
  if (rendezvous.empty()) {
    return absl::InvalidArgumentError("--rendezvous HOST:PORT is required when --tp-size > 1");
  }
  std::string h;
  int port = 0;
  TS_RETURN_IF_ERROR(SplitHostPort("--rendezvous", rendezvous, &h, &port));
  if (port == 0 && rank != 0) {
    return absl::InvalidArgumentError("--rendezvous: ranks > 0 need rank 0's actual port, not 0");
  }
  if (collective_timeout < milliseconds(200)) {
    return absl::InvalidArgumentError(absl::StrCat("--collective-timeout-s must be >= 0.2, got ",
                                                   collective_timeout.count() / 1e3));
  }
  if (rendezvous_timeout.count() <= 0) {
    return absl::InvalidArgumentError("--rendezvous-timeout-s must be > 0");
  }
  return absl::OkStatus();
}

RendezvousOptions GroupOptions::Rendezvous() const {
  RendezvousOptions o;
  o.address = rendezvous;
  o.rank = rank;
  o.size = size;
  o.connect_timeout = rendezvous_timeout;
  o.liveness_timeout = collective_timeout;
  o.ping_interval = std::min(milliseconds(200), collective_timeout / 4);
  return o;
}

milliseconds GroupOptions::HeartbeatInterval() const {
  return std::min(milliseconds(1000), collective_timeout / 4);
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> JoinWorkerGroup(
    const GroupOptions& options, Backend* backend, GroupHealth* health,
    const std::function<void(const std::string&)>& announce,
    std::function<void(const std::string&)> on_leader_lost) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto group = std::make_unique<WorkerGroup>();
  RendezvousOptions ro = options.Rendezvous();
  if (options.rank == 0) {
    TS_ASSIGN_OR_RETURN(group->server, RendezvousServer::Start(options.rendezvous, ro));
    std::string host;
    int port = 0;
    TS_RETURN_IF_ERROR(SplitHostPort("--rendezvous", options.rendezvous, &host, &port));
    if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
    ro.address = absl::StrCat(host, ":", group->server->port());
    if (announce) announce(ro.address);
    if (health != nullptr) {
      group->server->SetLossCallback(
          [health](int rank, const std::string& reason) { health->RankLost(rank, reason); });
    }
  }
  TS_ASSIGN_OR_RETURN(group->store, RendezvousClient::Connect(ro));
  if (options.rank > 0) TS_RETURN_IF_ERROR(group->store->StartSession(std::move(on_leader_lost)));

  GlooOptions g;
  g.rank = options.rank;
  g.size = options.size;
  g.host = options.host;
  g.prefix = "gloo/control";
  g.connect_timeout = options.rendezvous_timeout;
  g.comm.timeout = options.collective_timeout;
  TS_ASSIGN_OR_RETURN(group->control, CreateGlooCommunicator(g, group->store.get()));

  if (backend != nullptr && backend->device() == DeviceKind::kCuda) {
    std::string id;
    if (options.rank == 0) {
      TS_ASSIGN_OR_RETURN(id, CreateNcclUniqueId());
      TS_RETURN_IF_ERROR(group->store->Set("nccl/unique_id", id));
    } else {
      TS_ASSIGN_OR_RETURN(id, group->store->Get("nccl/unique_id", options.rendezvous_timeout));
    }
    NcclOptions n;
    n.rank = options.rank;
    n.size = options.size;
    n.device = options.cuda_device;
    n.unique_id = id;
    n.backend = backend;
    n.init_timeout = options.rendezvous_timeout;
    n.comm.timeout = options.collective_timeout;
    TS_ASSIGN_OR_RETURN(group->nccl, CreateNcclCommunicator(n));
  }
  return group;
}

absl::Status AwaitGroupReady(WorkerGroup* group, const GroupOptions& options,
                             const std::string& fingerprint, const GroupHealth* health) {
  RendezvousClient* store = group->store.get();
  if (options.rank == 0) TS_RETURN_IF_ERROR(store->Set("model/fingerprint", fingerprint));
  TS_ASSIGN_OR_RETURN(std::string want,
                      store->Get("model/fingerprint", options.rendezvous_timeout));
  if (want != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", options.rank, " loaded '", fingerprint, "' but rank 0 loaded '", want,
        "': every rank needs the same --model, --kv-blocks and --kv-block-size"));
  }
  TS_RETURN_IF_ERROR(store->Set(absl::StrCat("ready/", options.rank), "1"));
  const auto deadline = std::chrono::steady_clock::now() + options.rendezvous_timeout;
  for (int r = 0; r < options.size; ++r) {
    // Waits in slices so that rank 0 notices a rank lost while loading.
    while (true) {
      if (health != nullptr) TS_RETURN_IF_ERROR(health->status());
      absl::StatusOr<std::string> v = store->Get(absl::StrCat("ready/", r), milliseconds(500));
      if (v.ok()) break;
      if (v.status().code() != absl::StatusCode::kDeadlineExceeded) return v.status();
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", r, " of ", options.size, " did not finish loading within ",
            options.rendezvous_timeout.count() / 1000, " s"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace treespec
