#include "drafter_service/drafter_telemetry.h"

#include <string>
#include <utility>
#include <vector>

#include "rpc/step_stream.h"

namespace treespec {

void RegisterDrafterTelemetry(v1::Drafter::Service* service, ServiceObservability* obs) {
  MetricsRegistry* r = obs->registry();
  // (ok, info) from the Info handler, called in-process.
  auto info = [service] {
    v1::GetDrafterInfoRequest req;
    v1::DrafterInfoResponse resp;
    grpc::Status st = service->GetDrafterInfo(nullptr, &req, &resp);
    return std::make_pair(st.ok(), resp);
  };
  r->AddGaugeCallback("treespec_drafter_sequences", "Live sequences on the drafter", {}, [info] {
    auto [ok, i] = info();
    if (!ok) return std::vector<GaugeSample>{};
    return std::vector<GaugeSample>{{{}, double(i.num_sequences())}};
  });
  r->AddGaugeCallback("treespec_drafter_state_slots", "Drafter state slots by state (used, free)",
                      {"state"}, [info] {
                        auto [ok, i] = info();
                        if (!ok) return std::vector<GaugeSample>{};
                        return std::vector<GaugeSample>{
                            {{"used"}, double(i.slots_total() - i.slots_free())},
                            {{"free"}, double(i.slots_free())}};
                      });
  // The drafter's kind and the target layers it reads (EAGLE heads), as labels.
  r->AddGaugeCallback("treespec_drafter_info",
                      "1, labelled with the drafter's kind and the target layers whose features it "
                      "reads (empty for drafters that read tokens only)",
                      {"kind", "feature_layers"}, [info] {
                        auto [ok, i] = info();
                        if (!ok) return std::vector<GaugeSample>{};
                        std::string layers;
                        for (int32_t l : i.feature_layers()) {
                          layers += (layers.empty() ? "" : ",") + std::to_string(l);
                        }
                        return std::vector<GaugeSample>{{{i.kind(), layers}, 1.0}};
                      });
  const std::pair<const char*, int64_t (v1::DrafterInfoResponse::*)() const> predraft[] = {
      {"treespec_drafter_predraft_hits_total", &v1::DrafterInfoResponse::predraft_hits},
      {"treespec_drafter_predraft_misses_total", &v1::DrafterInfoResponse::predraft_misses},
      {"treespec_drafter_predraft_unprepared_total",
       &v1::DrafterInfoResponse::predraft_unprepared}};
  for (const auto& [name, field] : predraft) {
    r->AddCounterCallback(name, "Drafts answered from a pre-drafted tree (hits), with prepared "
                          "trees none of which matched (misses), or with none ready (unprepared)",
                          [info, field = field] {
                            auto [ok, i] = info();
                            return ok ? double((i.*field)()) : 0.0;
                          });
  }
  HistogramFamily* step = r->AddHistogram(
      "treespec_drafter_step_seconds",
      "Drafter step time: one batched Draft (tree construction) or Open (prompt) call",
      StepBuckets(), {"phase"});
  obs->TimeMethod(kDrafterDraftMethod, step->WithLabels({"draft"}));
  obs->TimeMethod("/treespec.v1.Drafter/Open", step->WithLabels({"prefill"}));
  obs->Untraced("/treespec.v1.Drafter/GetDrafterInfo");
  obs->Untraced("/treespec.v1.Drafter/Release");
}

}  // namespace treespec
