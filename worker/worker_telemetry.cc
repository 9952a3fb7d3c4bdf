#include "worker/worker_telemetry.h"

#include <utility>
#include <vector>

#include "rpc/step_stream.h"

namespace treespec {

void RegisterWorkerTelemetry(v1::Worker::Service* service, ServiceObservability* obs) {
  MetricsRegistry* r = obs->registry();
  // (ok, info) from the Info handler, called in-process.
  auto info = [service] {
    v1::GetWorkerInfoRequest req;
    v1::WorkerInfo resp;
    grpc::Status st = service->GetWorkerInfo(nullptr, &req, &resp);
    return std::make_pair(st.ok(), resp);
  };
  r->AddGaugeCallback("treespec_worker_sequences", "Live sequences on the worker", {}, [info] {
    auto [ok, i] = info();
    if (!ok) return std::vector<GaugeSample>{};
    return std::vector<GaugeSample>{{{}, double(i.num_sequences())}};
  });
  r->AddGaugeCallback("treespec_worker_kv_blocks", "KV cache blocks by state (used, free)",
                      {"state"}, [info] {
                        auto [ok, i] = info();
                        if (!ok) return std::vector<GaugeSample>{};
                        return std::vector<GaugeSample>{{{"used"}, double(i.kv_blocks_used())},
                                                        {{"free"}, double(i.kv_blocks_free())}};
                      });
  r->AddGaugeCallback("treespec_worker_kv_block_size_tokens", "Tokens per KV cache block", {},
                      [info] {
                        auto [ok, i] = info();
                        if (!ok) return std::vector<GaugeSample>{};
                        return std::vector<GaugeSample>{{{}, double(i.kv_block_size())}};
                      });
  HistogramFamily* step = r->AddHistogram(
      "treespec_worker_step_seconds",
      "Worker step time: one batched Verify (tree forward + acceptance) or Open (prefill) call",
      StepBuckets(), {"phase"});
  obs->TimeMethod(kWorkerVerifyMethod, step->WithLabels({"verify"}));
  obs->TimeMethod("/treespec.v1.Worker/Open", step->WithLabels({"prefill"}));
  obs->Untraced("/treespec.v1.Worker/GetWorkerInfo");
  obs->Untraced("/treespec.v1.Worker/Release");
  obs->WatchHealth([service] {
    v1::GetWorkerInfoRequest req;
    v1::WorkerInfo resp;
    return service->GetWorkerInfo(nullptr, &req, &resp).error_code() ==
           grpc::StatusCode::UNAVAILABLE;
  });
}

}  // namespace treespec
