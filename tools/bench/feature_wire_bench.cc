// feature_wire_bench: what carrying the target's features to an EAGLE drafter
// costs per step on the CPU, hop by hop, for the demo heads' widths (EAGLE: one
// layer of 256; EAGLE-3: three) and SmolLM2-135M's (576, 3 x 576): the
// worker's f32 -> f16 encoding of the accepted nodes' rows (rpc/proto_convert
// ToProto), the coordinator's log append and slice for the next Draft (bytes
// only, as coordinator/lane_rpc.cc does), and the drafter's f16 -> f32 decoding
// (FromProto), with the bytes each step adds to a VerifyResponse and a
// DraftRequest. Rows per step = τ (accepted drafts + 1).
//
//   build/bin/feature_wire_bench [--rows 4] [--iters 20000]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "rpc/proto_convert.h"

ABSL_FLAG(int32_t, rows, 4, "Feature rows per step (accepted drafts + 1)");
ABSL_FLAG(int32_t, iters, 20000, "Steps timed per width");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

double NsPer(Clock::time_point t0, int iters) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

int Main() {
  const int rows = absl::GetFlag(FLAGS_rows), iters = absl::GetFlag(FLAGS_iters);
  std::printf("\n%-24s %6s %14s %12s %12s %12s %12s\n", "head", "width", "bytes/step", "encode ns",
              "log+slice ns", "decode ns", "total us");
  struct Case {
    const char* name;
    int width;
  };
  for (const Case& c : {Case{"demo eagle (1x256)", 256}, Case{"demo eagle3 (3x256)", 768},
                        Case{"smollm2 eagle (1x576)", 576}, Case{"smollm2 eagle3 (3x576)", 1728}}) {
    std::vector<float> values(static_cast<size_t>(rows) * c.width);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * static_cast<float>(i % 977) - 4.0f;
    v1::Features f;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) ToProto(values, c.width, &f);
    const double enc = NsPer(t0, iters);
    std::string log;
    v1::Features out;
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (log.size() > (64u << 20)) log.clear();
      const size_t begin = log.size();
      log.append(f.f16());
      out.set_num_rows(rows);
      out.set_width(c.width);
      out.set_f16(log.substr(begin, f.f16().size()));
    }
    const double slice = NsPer(t0, iters);
    std::vector<float> back;
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!FromProto(out, "features", &back).ok()) return 1;
    }
    const double dec = NsPer(t0, iters);
    std::printf("%-24s %6d %14zu %12.0f %12.0f %12.0f %12.2f\n", c.name, c.width,
                f.ByteSizeLong(), enc, slice, dec, (enc + slice + dec) / 1000.0);
  }
  std::printf("\n%d rows per step; bytes/step is one Features message (a VerifyResponse and the "
              "next DraftRequest each carry one per sequence)\n",
              rows);
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return treespec::Main();
}
