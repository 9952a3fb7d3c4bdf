#include "core/spec/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/json_fields.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr int kCacheFormatVersion = 1;

std::vector<std::string> VerifyFeatureNames() {
  return {"step", "sequences", "tree_tokens", "context_tokens", "tree_tokens_past_knee"};
}
std::vector<std::string> DraftFeatureNames() {
  return {"call", "levels", "sequence_levels", "nodes"};
}

double MeanAbsRelativeError(const LinearTimeModel& m, const std::vector<TimeSample>& samples) {
  double sum = 0.0;
  for (const TimeSample& s : samples) sum += std::fabs(m.Predict(s.x) - s.seconds) / s.seconds;
  return samples.empty() ? 0.0 : sum / samples.size();
}

std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  return out.empty() ? "_" : out;
}

template <typename F, typename Fn>
absl::StatusOr<std::vector<std::pair<F, double>>> RunGrid(const Fn& step,
                                                          const std::vector<F>& grid, int repeats) {
  if (repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", repeats));
  }
  std::vector<std::pair<F, double>> out;
  if (grid.empty()) return out;
  TS_RETURN_IF_ERROR(step(grid[0]).status());  // warm-up: first-call allocations, caches
  for (const F& f : grid) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      TS_ASSIGN_OR_RETURN(double t, step(f));
      times.push_back(t);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    out.emplace_back(f, times[times.size() / 2]);
  }
  return out;
}

// The JSON of a LinearTimeModel whose coefficients and prior are `theta`.
nlohmann::json ModelJson(const std::vector<std::string>& names, const std::vector<double>& theta) {
  nlohmann::json j;
  j["features"] = names;
  j["coefficients"] = theta;
  j["prior"] = theta;
  j["residual_scale"] = 0.0;
  return j;
}

}  // namespace

// ---- VerifyCostModel ----

VerifyCostModel::VerifyCostModel(LinearTimeModelOptions options, int64_t knee_tokens)
    : knee_(std::max<int64_t>(knee_tokens, 0)), model_(VerifyFeatureNames(), options) {}

std::vector<double> VerifyCostModel::Features(const VerifyStepFeatures& f) const {
  const double past = knee_ > 0 ? std::max<int64_t>(0, f.tree_tokens - knee_) : 0;
  return {1.0, static_cast<double>(f.batch), static_cast<double>(f.tree_tokens),
          static_cast<double>(f.context_tokens), past};
}

absl::StatusOr<VerifyCostModel> VerifyCostModel::FitProfile(
    const std::vector<VerifySample>& samples, LinearTimeModelOptions options) {
  std::set<int64_t> knees = {0};
  for (const VerifySample& s : samples) knees.insert(s.features.tree_tokens);
  std::optional<VerifyCostModel> best;
  double best_err = 0.0;
  for (int64_t knee : knees) {
    VerifyCostModel m(options, knee);
    std::vector<TimeSample> rows;
    rows.reserve(samples.size());
    for (const VerifySample& s : samples) rows.push_back({m.Features(s.features), s.seconds});
    TS_RETURN_IF_ERROR(m.model_.Fit(rows));
    const double err = MeanAbsRelativeError(m.model_, rows);
    // A knee must earn its place: 2% less error than the best so far.
    if (!best.has_value() || err < best_err * 0.98) {
      best = std::move(m);
      best_err = err;
    }
  }
  return *std::move(best);
}

absl::StatusOr<VerifyCostModel> VerifyCostModel::FromCoefficients(
    const Coefficients& c, LinearTimeModelOptions options) {
  if (c.knee_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("knee_tokens must be >= 0, got ", c.knee_tokens));
  }
  VerifyCostModel m(options, c.knee_tokens);
  const std::vector<double> theta = {c.per_step, c.per_sequence, c.per_token,
                                     c.per_context_token,
                                     c.knee_tokens > 0 ? c.per_token_past_knee : 0.0};
  TS_ASSIGN_OR_RETURN(m.model_, LinearTimeModel::FromJson(ModelJson(VerifyFeatureNames(), theta),
                                                          VerifyFeatureNames(), options));
  return m;
}

double VerifyCostModel::Predict(const VerifyStepFeatures& f) const {
  return model_.Predict(Features(f));
}

void VerifyCostModel::Observe(const VerifyStepFeatures& f, double seconds) {
  model_.Observe(Features(f), seconds);
}

VerifyCostModel::Coefficients VerifyCostModel::coefficients() const {
  const std::vector<double>& t = model_.coefficients();
  return {t[0], t[1], t[2], t[3], knee_ > 0 ? t[4] : 0.0, knee_};
}

nlohmann::json VerifyCostModel::ToJson() const {
  nlohmann::json j = model_.ToJson();
  j["knee_tokens"] = knee_;
  return j;
}

absl::StatusOr<VerifyCostModel> VerifyCostModel::FromJson(const nlohmann::json& j,
                                                          LinearTimeModelOptions options) {
  if (!j.is_object()) return absl::InvalidArgumentError("verify: not a JSON object");
  JsonFields fields(j, "verify");
  TS_ASSIGN_OR_RETURN(int64_t knee, fields.IntOr("knee_tokens", 0));
  if (knee < 0) return fields.Error("knee_tokens", absl::StrCat("must be >= 0, got ", knee));
  VerifyCostModel m(options, knee);
  TS_ASSIGN_OR_RETURN(m.model_, LinearTimeModel::FromJson(j, VerifyFeatureNames(), options));
  return m;
}

// ---- DraftCostModel ----

DraftCostModel::DraftCostModel(LinearTimeModelOptions options)
    : model_(DraftFeatureNames(), options) {}

std::vector<double> DraftCostModel::Features(const DraftStepFeatures& f) {
  return {f.levels > 0 ? 1.0 : 0.0, static_cast<double>(f.levels),
          static_cast<double>(f.seq_levels), static_cast<double>(f.nodes)};
}

absl::StatusOr<DraftCostModel> DraftCostModel::FitProfile(const std::vector<DraftSample>& samples,
                                                          LinearTimeModelOptions options) {
  DraftCostModel m(options);
  std::vector<TimeSample> rows;
  for (const DraftSample& s : samples) {
    if (s.features.levels <= 0) continue;  // nothing drafted: nothing to learn
    rows.push_back({Features(s.features), s.seconds});
  }
  TS_RETURN_IF_ERROR(m.model_.Fit(rows));
  return m;
}

absl::StatusOr<DraftCostModel> DraftCostModel::FromCoefficients(
    const Coefficients& c, LinearTimeModelOptions options) {
  DraftCostModel m(options);
  const std::vector<double> theta = {c.per_call, c.per_level, c.per_sequence_level, c.per_node};
  TS_ASSIGN_OR_RETURN(m.model_, LinearTimeModel::FromJson(ModelJson(DraftFeatureNames(), theta),
                                                          DraftFeatureNames(), options));
  return m;
}

double DraftCostModel::Predict(const DraftStepFeatures& f) const {
  if (f.levels <= 0) return 0.0;
  return model_.Predict(Features(f));
}

void DraftCostModel::Observe(const DraftStepFeatures& f, double seconds) {
  if (f.levels <= 0) return;
  model_.Observe(Features(f), seconds);
}

DraftCostModel::Coefficients DraftCostModel::coefficients() const {
  const std::vector<double>& t = model_.coefficients();
  return {t[0], t[1], t[2], t[3]};
}

nlohmann::json DraftCostModel::ToJson() const { return model_.ToJson(); }

absl::StatusOr<DraftCostModel> DraftCostModel::FromJson(const nlohmann::json& j,
                                                        LinearTimeModelOptions options) {
  DraftCostModel m(options);
  TS_ASSIGN_OR_RETURN(m.model_, LinearTimeModel::FromJson(j, DraftFeatureNames(), options));
  return m;
}

// ---- StepCostModel: the start-up cache ----

std::string StepCostModel::ToJsonText() const {
  nlohmann::json j;
  j["format_version"] = kCacheFormatVersion;
  j["model"] = model;
  j["device"] = device;
  j["verify"] = verify.ToJson();
  j["draft"] = draft.ToJson();
  return j.dump(2);
}

absl::StatusOr<StepCostModel> StepCostModel::FromJsonText(const std::string& text,
                                                          LinearTimeModelOptions options) {
  TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, "cost model"));
  if (!j.is_object()) return absl::InvalidArgumentError("cost model: not a JSON object");
  JsonFields fields(j, "cost model");
  TS_ASSIGN_OR_RETURN(int64_t version, fields.Int("format_version"));
  if (version != kCacheFormatVersion) {
    return fields.Error("format_version",
                        absl::StrCat("want ", kCacheFormatVersion, ", got ", version));
  }
  StepCostModel m;
  TS_ASSIGN_OR_RETURN(m.model, fields.String("model"));
  TS_ASSIGN_OR_RETURN(m.device, fields.String("device"));
  if (!j.contains("verify") || !j.contains("draft")) {
    return absl::InvalidArgumentError("cost model: needs fields \"verify\" and \"draft\"");
  }
  TS_ASSIGN_OR_RETURN(m.verify, VerifyCostModel::FromJson(j["verify"], options));
  TS_ASSIGN_OR_RETURN(m.draft, DraftCostModel::FromJson(j["draft"], options));
  return m;
}

std::string StepCostModel::CacheFileName(const std::string& model, const std::string& device) {
  return absl::StrCat("costmodel_", Sanitize(model), "_", Sanitize(device), ".json");
}

absl::Status StepCostModel::SaveToCache(const std::string& dir) const {
  const std::string path = absl::StrCat(dir, "/", CacheFileName(model, device));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ToJsonText();
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepCostModel> StepCostModel::LoadFromCache(const std::string& dir,
                                                           const std::string& model,
                                                           const std::string& device,
                                                           LinearTimeModelOptions options) {
  const std::string path = absl::StrCat(dir, "/", CacheFileName(model, device));
  std::ifstream in(path);
  if (!in.is_open()) return absl::NotFoundError(absl::StrCat("no cost model cache at ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<StepCostModel> m = FromJsonText(ss.str(), options);
  if (!m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", m.status().message()));
  }
  if (m->model != model || m->device != device) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is for model \"", m->model,
                                                      "\" on \"", m->device, "\", not \"", model,
                                                      "\" on \"", device, "\""));
  }
  return m;
}

// ---- Profiling ----

absl::StatusOr<std::vector<VerifySample>> ProfileVerify(const VerifyStepFn& step,
                                                        const std::vector<VerifyStepFeatures>& grid,
                                                        int repeats) {
  TS_ASSIGN_OR_RETURN(auto runs, RunGrid(step, grid, repeats));
  std::vector<VerifySample> out;
  for (const auto& [f, t] : runs) out.push_back({f, t});
  return out;
}

absl::StatusOr<std::vector<DraftSample>> ProfileDraft(const DraftStepFn& step,
                                                      const std::vector<DraftStepFeatures>& grid,
                                                      int repeats) {
  TS_ASSIGN_OR_RETURN(auto runs, RunGrid(step, grid, repeats));
  std::vector<DraftSample> out;
  for (const auto& [f, t] : runs) out.push_back({f, t});
  return out;
}

std::vector<VerifyStepFeatures> VerifyGrid(const std::vector<int64_t>& batches,
                                           const std::vector<int64_t>& tokens_per_sequence,
                                           const std::vector<int64_t>& context_per_sequence) {
  std::vector<VerifyStepFeatures> grid;
  for (int64_t b : batches) {
    for (int64_t t : tokens_per_sequence) {
      for (int64_t c : context_per_sequence) grid.push_back({b, b * t, b * c});
    }
  }
  return grid;
}

std::vector<DraftStepFeatures> DraftGrid(const std::vector<int64_t>& batches,
                                         const std::vector<int64_t>& depths,
                                         const std::vector<int64_t>& nodes_per_level) {
  std::vector<DraftStepFeatures> grid;
  for (int64_t b : batches) {
    for (int64_t d : depths) {
      for (int64_t n : nodes_per_level) grid.push_back({d, b * d, b * d * n});
    }
  }
  return grid;
}

}  // namespace treespec
