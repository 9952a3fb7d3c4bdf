// Start-up cost profiles shared by the worker (verify step) and the drafter
// (Draft call): where they are cached on disk, how a service loads one or
// measures and caches it, and their proto form in WorkerInfo / DrafterInfo.
//
// Why a cache. Profiling costs a second or two on a CPU and more on a big
// GPU model, and the result only depends on the model, the device and the
// dtype, so a restart of the same service reads it back. The key holds the
// model's identity (directory name plus a fingerprint of its config, so two
// checkpoints named alike do not share an entry) and the device string with
// its dtype and host threads, and the engine's build (EngineBuildId), so a
// rebuilt engine, whose kernels may be faster or slower, measures afresh
// instead of planning with the old binary's costs. A cache entry that does
// not parse, or was written for another key, is ignored with a warning and
// measured afresh: the cache can only save time, never stop a service from
// starting.
//
// Both services store their half in a StepCostModel (step_cost_model.h); the
// other half stays at zero coefficients.
//
// Plain functions; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "core/spec/step_cost_model.h"
#include "treespec/v1/common.pb.h"

namespace treespec {

// $TREESPEC_CACHE_DIR, else $XDG_CACHE_HOME/treespec, else
// $HOME/.cache/treespec, else /tmp/treespec-cache.
std::string DefaultCostCacheDir();

// "NAME cfg=HEX": the model path's last component and an FNV-1a hash of its
// config.json (a .gguf file: of its size), stable across processes.
std::string ModelIdentity(const std::string& model_path);

// The running executable's GNU build-id in hex (the linker's hash of the
// linked output: it changes whenever any code linked into the binary does),
// or, without that note, a hash of the executable's path, size and mtime.
// Computed once.
std::string EngineBuildId();

struct LoadedProfile {
  StepCostModel model;
  v1::CostProfileSource source = v1::COST_PROFILE_SOURCE_UNSPECIFIED;
  int64_t profile_ns = 0;  // time measuring took (0 from the cache)
};

// Reads the entry for (model_key, device_key) from `cache_dir`, or runs
// `measure` and writes its result there (creating the directory). An
// unreadable, corrupt or mismatched entry, or a failed write, is reported on
// `warn` and otherwise ignored. An empty `cache_dir` neither reads nor
// writes. Only `measure`'s own error is returned.
using MeasureFn = std::function<absl::StatusOr<StepCostModel>()>;
absl::StatusOr<LoadedProfile> LoadOrMeasureProfile(const std::string& cache_dir,
                                                   const std::string& model_key,
                                                   const std::string& device_key,
                                                   const MeasureFn& measure, std::ostream& warn);

// Proto conversions. FromProto: NOT_FOUND when the source is UNSPECIFIED
// (no profile), INVALID_ARGUMENT naming the field for a negative or
// non-finite coefficient.
void ToProto(const LoadedProfile& p, v1::VerifyCostProfile* out);
void ToProto(const LoadedProfile& p, v1::DraftCostProfile* out);
absl::StatusOr<VerifyCostModel> FromProto(const v1::VerifyCostProfile& p);
absl::StatusOr<DraftCostModel> FromProto(const v1::DraftCostProfile& p);

}  // namespace treespec
