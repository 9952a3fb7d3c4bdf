// Reading the committed Hugging Face goldens (tests/golden/data/<model>/, made by
// tools/goldens/make_goldens.py) and comparing treespec's outputs with them.
// Header-only: shared by the golden tests, each its own executable.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/util/mapped_file.h"
#include "core/util/npy.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec::testing {

inline constexpr int kGoldenFormatVersion = 1;

struct GoldenPrompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy_new_ids;  // transformers generate(do_sample=False)
  std::string logits;                   // file names inside the golden dir ("" if none)
  std::string conv_state;
  std::string ssm_state;
};

struct GoldenSet {
  std::string dir;  // tests/golden/data/<model>
  nlohmann::json manifest;
  std::vector<GoldenPrompt> prompts;
};

inline std::string FixtureDir(const std::string& model) {
  return SourceDir() + "/tests/fixtures/models/" + model;
}

inline absl::StatusOr<GoldenSet> LoadGoldenSet(const std::string& model) {
  GoldenSet g;
  g.dir = SourceDir() + "/tests/golden/data/" + model;
  const std::string path = g.dir + "/manifest.json";
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  g.manifest = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (g.manifest.is_discarded() || !g.manifest.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": invalid JSON"));
  }
  if (g.manifest.value("format_version", -1) != kGoldenFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": format_version is not ", kGoldenFormatVersion));
  }
  for (const auto& p : g.manifest["prompts"]) {
    GoldenPrompt gp;
    gp.name = p.value("name", "");
    gp.ids = p["ids"].get<std::vector<int32_t>>();
    gp.greedy_new_ids = p.value("greedy_new_ids", std::vector<int32_t>{});
    gp.logits = p.value("logits", "");
    gp.conv_state = p.value("conv_state", "");
    gp.ssm_state = p.value("ssm_state", "");
    g.prompts.push_back(std::move(gp));
  }
  return g;
}

inline absl::StatusOr<NpyArray> ReadGoldenNpy(const GoldenSet& g, const std::string& file) {
  return ReadNpy(g.dir + "/" + file);
}

// The error measure of every golden comparison: for each row r (a position,
// or a layer of a state), err(r) = max_v |a[r,v] − ref[r,v]| / max_v |ref[r,v]|,
// i.e. the worst absolute error relative to the row's largest magnitude. This
// stays meaningful for entries near zero (where an elementwise relative error
// explodes) while scaling with the row. The result is the worst row.
struct RowError {
  double max_rel = 0.0;
  int64_t row = -1, col = -1;  // where the worst absolute error of the worst row is
  float got = 0.0f, want = 0.0f;
  std::string Describe() const {
    std::ostringstream os;
    os << "max rel error " << max_rel << " at row " << row << " col " << col << " (got " << got
       << ", want " << want << ")";
    return os.str();
  }
};

inline RowError MaxRowRelError(const float* got, const float* want, int64_t rows, int64_t cols) {
  RowError e;
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 0.0, worst = -1.0;
    int64_t worst_col = 0;
    for (int64_t c = 0; c < cols; ++c) {
      scale = std::max(scale, std::fabs(static_cast<double>(want[r * cols + c])));
      const double d = std::fabs(static_cast<double>(got[r * cols + c]) - want[r * cols + c]);
      if (d > worst || std::isnan(d)) {
        worst = std::isnan(d) ? INFINITY : d;
        worst_col = c;
      }
    }
    const double rel = worst / std::max(scale, 1e-30);
    if (r == 0 || rel > e.max_rel) {
      e.max_rel = rel;
      e.row = r;
      e.col = worst_col;
      e.got = got[r * cols + worst_col];
      e.want = want[r * cols + worst_col];
    }
  }
  return e;
}

inline int32_t Argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

}  // namespace treespec::testing
