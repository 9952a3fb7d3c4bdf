// trace_bench: what tracing costs the coordinator's step loop, per sequence
// and step (one draft + one verify RPC), for the --trace_steps modes — spans
// (a draft and a verify span per sequence-step), events (two events on one
// decode span per sequence), off (request-level spans only) — against a
// request that is not sampled and against no telemetry at all; plus the
// export thread's OTLP encoding cost per span. Prints a table.
//
//   trace_bench [--batch 1,16,64] [--steps 2000]
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "coordinator/lane_telemetry.h"
#include "obs/otlp.h"

ABSL_FLAG(std::string, batch, "1,16,64", "Sequences per batched RPC");
ABSL_FLAG(int32_t, steps, 2000, "Steps per measurement");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

// Swallows batches (the export thread's HTTP cost is not the step loop's).
class NullExporter : public SpanExporter {
 public:
  absl::Status Export(const std::vector<Attribute>&, const std::vector<SpanData>&) override {
    return absl::OkStatus();
  }
};

struct FakeSeq {
  SeqTelemetry tel;
};

enum class Mode { kNone, kUnsampled, kOff, kEvents, kSpans };

const char* Name(Mode m) {
  switch (m) {
    case Mode::kNone: return "no telemetry";
    case Mode::kUnsampled: return "metrics, request unsampled";
    case Mode::kOff: return "--trace_steps=off";
    case Mode::kEvents: return "--trace_steps=events";
    case Mode::kSpans: return "--trace_steps=spans";
  }
  return "";
}

// ns per sequence-step.
double Measure(Mode mode, int batch, int steps) {
  MetricsRegistry registry;
  TracerOptions to;
  to.queue_capacity = 1 << 20;
  to.sample_ratio = mode == Mode::kUnsampled ? 0.0 : 1.0;
  Tracer tracer(to, std::make_unique<NullExporter>());
  StepTracing st = mode == Mode::kEvents ? StepTracing::kEvents
                   : mode == Mode::kOff  ? StepTracing::kOff
                                         : StepTracing::kSpans;
  CoordinatorTelemetry telemetry(&registry, &tracer, st);
  CoordinatorTelemetry* t = mode == Mode::kNone ? nullptr : &telemetry;
  std::vector<std::unique_ptr<FakeSeq>> seqs;
  std::vector<std::shared_ptr<RequestState>> reqs;
  for (int i = 0; i < batch; ++i) {
    GenerationRequest g;
    g.drafter = "mamba";
    reqs.push_back(std::make_shared<RequestState>(g, Clock::now(), std::nullopt,
                                                  tracer.NewContext({})));
    seqs.push_back(std::make_unique<FakeSeq>());
    seqs.back()->tel.Admit(t, *reqs.back(), Clock::now());
  }
  const std::string tree = "3,2,2,1,1";
  const auto t0 = Clock::now();
  for (int step = 0; step < steps; ++step) {
    {
      BatchRpcTrace draft(t, "draft", seqs);
      draft.End(absl::OkStatus());
      for (auto& s : seqs) s->tel.OnDraft(tree, 45);
    }
    {
      BatchRpcTrace verify(t, "verify", seqs);
      verify.End(absl::OkStatus());
      for (auto& s : seqs) s->tel.OnVerify(45, step % 4, tree);
    }
    // Events accumulate on the decode span; end sequences now and then as a
    // real lane does, so the events are paid for once.
    if (mode == Mode::kEvents && step % 128 == 127) {
      for (auto& s : seqs) s->tel.Finish(absl::OkStatus());
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  const TracerStats stats = tracer.stats();
  if (stats.dropped > 0) std::fprintf(stderr, "warning: %llu spans dropped\n",
                                      static_cast<unsigned long long>(stats.dropped));
  return ns / (static_cast<double>(steps) * batch);
}

double EncodeNsPerSpan() {
  std::vector<SpanData> spans(512);
  for (SpanData& s : spans) {
    s.context.trace_id = NewTraceId();
    s.context.span_id = NewSpanId();
    s.context.flags = 1;
    s.name = "verify";
    s.Add("treespec.step", int64_t{12});
    s.Add("treespec.tree.size", int64_t{45});
    s.Add("treespec.accepted", int64_t{3});
    s.Add("treespec.batch_size", int64_t{16});
  }
  const std::vector<Attribute> resource = {{"service.name", std::string("treespec-coordinator")}};
  const int rounds = 50;
  size_t bytes = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) bytes += EncodeOtlpTraces(resource, spans).size();
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  std::printf("OTLP encoding (export thread): %.0f ns/span, %.0f bytes/span\n",
              ns / (rounds * spans.size()), static_cast<double>(bytes) / (rounds * spans.size()));
  return ns / (rounds * spans.size());
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using treespec::Mode;
  std::vector<int> batches;
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batch), ',')) {
    batches.push_back(std::stoi(std::string(b)));
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  std::printf("coordinator step-loop cost of telemetry, ns per sequence-step (draft + verify)\n");
  std::printf("%-30s", "mode \\ batch");
  for (int b : batches) std::printf(" %10d", b);
  std::printf("\n");
  for (Mode m : {Mode::kNone, Mode::kUnsampled, Mode::kOff, Mode::kEvents, Mode::kSpans}) {
    std::printf("%-30s", treespec::Name(m));
    for (int b : batches) std::printf(" %10.0f", treespec::Measure(m, b, steps));
    std::printf("\n");
  }
  treespec::EncodeNsPerSpan();
  return 0;
}
