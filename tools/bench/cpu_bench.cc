// cpu_bench: the CPU engine against llama.cpp on the same weights.
//
// For one model (a Hugging Face directory or a GGUF file) and each thread
// count, treespec's AR decode (batch 1, greedy: each step feeds back the argmax
// of the last, N tokens after a 1-token prompt) and the prefill of a P-token
// prompt, in tokens/s. When a llama.cpp `llama-bench` binary is given
// (--llama_bench, or found on PATH) and a GGUF of the same weights
// (--gguf, or --model itself), llama-bench's tg N and pp P run at the same
// thread counts, the two engines alternating for --rounds rounds; medians are
// printed with the ratio treespec / llama.cpp (> 1: treespec faster). The
// ratios are measured side by side in one run, as STYLE.md asks.
//
//   build/bin/cpu_bench --model models/demo/target --dtype f16
//       --gguf /tmp/target-f16.gguf --threads 1,2 --rounds 3  (one line)
//   build/bin/cpu_bench --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
//
// Last, the machine's memory read bandwidth at each thread count (a 256 MiB
// buffer, beyond any cache, summed by that many threads): batch-1 decode of a
// model larger than the caches reads every weight once per token, so this is
// the ceiling of its scaling with threads.
//
// --dtype picks the weight storage of treespec's CPU backend ("cpu:T:<dtype>",
// docs/cpu_engine.md; "auto" keeps GGUF quantised matrices quantised). tools/bench/build_llama_cpp.sh builds
// llama-bench outside the repository.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/model/gguf_model.h"
#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "core/util/cli_args.h"
#include "core/util/status_macros.h"
#include "kernels/cpu/dense_ops.h"

ABSL_FLAG(std::string, model, "", "HF model directory or .gguf file (treespec side)");
ABSL_FLAG(std::string, gguf, "", "GGUF of the same weights for llama.cpp (default: --model if .gguf)");
ABSL_FLAG(std::string, dtype, "",
          "treespec weight storage: f32, f16, bf16 or auto (as stored, GGUF Q8_0/Q4_0/Q4_1/Q4_K kept "
          "quantised); empty: the backend's default (f32)");
ABSL_FLAG(std::string, threads, "1,2", "Comma-separated thread counts");
ABSL_FLAG(int32_t, decode, 64, "Tokens generated per decode measurement");
ABSL_FLAG(int32_t, prefill, 64, "Prompt tokens of the prefill measurement");
ABSL_FLAG(int32_t, rounds, 3, "Alternating rounds; medians are reported");
ABSL_FLAG(std::string, llama_bench, "", "Path of llama.cpp's llama-bench (default: PATH lookup)");
ABSL_FLAG(bool, bandwidth, true, "Also measure the memory read bandwidth at each thread count");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Speeds {
  double decode = 0.0, prefill = 0.0;  // tokens/s
};

// One model loaded on one backend, with a KV cache big enough for one
// sequence of prefill + decode tokens.
struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<PagedKvCache> cache;
};

absl::StatusOr<Engine> OpenEngine(const std::string& path, int threads, const std::string& dtype,
                                  int max_len) {
  Engine e;
  std::string spec = absl::StrCat("cpu:", threads);
  if (!dtype.empty()) absl::StrAppend(&spec, ":", dtype);
  absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(spec);
  if (!be.ok()) return be.status();
  e.backend = std::move(*be);
  absl::StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::Load(path, e.backend.get());
  if (!m.ok()) return m.status();
  e.model = std::move(*m);
  absl::StatusOr<std::unique_ptr<PagedKvCache>> c =
      PagedKvCache::Create(e.model->KvOptions(max_len / 16 + 2, 16), e.backend.get());
  if (!c.ok()) return c.status();
  e.cache = std::move(*c);
  return e;
}

// Greedy AR decode of `n` tokens after the 1-token prompt {first}; tokens/s.
absl::StatusOr<double> TimeDecode(Engine& e, int n) {
  const int64_t seq = e.cache->CreateSequence();
  TS_RETURN_IF_ERROR(e.cache->Reserve(seq, n + 2));
  ForwardOptions opt;
  opt.argmax_only = true;
  ForwardOutput out;
  int32_t tok = 1;
  TS_RETURN_IF_ERROR(e.model->Forward({{seq, {tok}, {}, LogitsMode::kLast}}, e.cache.get(), &out, opt));
  TS_RETURN_IF_ERROR(e.cache->Commit(seq, 1));
  tok = out.argmax.at(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    TS_RETURN_IF_ERROR(
        e.model->Forward({{seq, {tok}, {}, LogitsMode::kLast}}, e.cache.get(), &out, opt));
    TS_RETURN_IF_ERROR(e.cache->Commit(seq, 1));
    tok = out.argmax.at(0);
  }
  const double s = Secs(t0, Clock::now());
  e.cache->Release(seq);
  return n / s;
}

// One forward pass over a `p`-token prompt (last-row logits); tokens/s.
absl::StatusOr<double> TimePrefill(Engine& e, int p) {
  const int64_t seq = e.cache->CreateSequence();
  TS_RETURN_IF_ERROR(e.cache->Reserve(seq, p));
  const int64_t V = e.model->config().vocab_size;
  std::vector<int32_t> prompt(p);
  for (int i = 0; i < p; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 11) % V);
  ForwardOptions opt;
  opt.argmax_only = true;
  ForwardOutput out;
  const auto t0 = Clock::now();
  TS_RETURN_IF_ERROR(e.model->Forward({{seq, prompt, {}, LogitsMode::kLast}}, e.cache.get(), &out, opt));
  const double s = Secs(t0, Clock::now());
  e.cache->Release(seq);
  return p / s;
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string cand = absl::StrCat(dir, "/", name);
    if (!dir.empty() && access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

// Runs llama-bench once (one repetition of pp and tg) and reads avg_ts of
// both from its CSV output.
absl::StatusOr<Speeds> RunLlamaBench(const std::string& bin, const std::string& gguf,
                                     int threads, int p, int n) {
  const std::string cmd = absl::StrCat("'", bin, "' -m '", gguf, "' -t ", threads, " -p ", p,
                                       " -n ", n, " -r 1 -o csv 2>/dev/null");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot run ", cmd));
  std::string text;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof(buf), f)) text.append(buf, got);
  const int rc = pclose(f);
  if (rc != 0) return absl::InternalError(absl::StrCat(cmd, " exited with ", rc));
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() < 2) return absl::InternalError(absl::StrCat("no CSV from ", cmd));
  auto fields = [](const std::string& l) {
    std::vector<std::string> v = absl::StrSplit(l, ',');
    for (std::string& s : v) s.erase(std::remove(s.begin(), s.end(), '"'), s.end());
    return v;
  };
  const std::vector<std::string> head = fields(lines[0]);
  auto col = [&](const char* name) {
    return static_cast<int>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  const int c_p = col("n_prompt"), c_n = col("n_gen"), c_ts = col("avg_ts");
  Speeds s;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> v = fields(lines[i]);
    if (static_cast<int>(v.size()) <= std::max({c_p, c_n, c_ts})) continue;
    double ts = 0;
    if (!absl::SimpleAtod(v[c_ts], &ts)) continue;
    if (v[c_p] == std::to_string(p) && v[c_n] == "0") s.prefill = ts;
    if (v[c_n] == std::to_string(n) && v[c_p] == "0") s.decode = ts;
  }
  if (s.prefill == 0 || s.decode == 0) {
    return absl::InternalError(absl::StrCat("llama-bench CSV lacks pp", p, "/tg", n, ": ", text));
  }
  return s;
}

void Fail(const absl::Status& s) {
  std::fprintf(stderr, "cpu_bench: %s\n", s.ToString().c_str());
  std::exit(1);
}

void PrintTable(const std::string& model, const std::string& gguf, const std::string& lb,
                bool with_llama, const std::vector<int>& threads,
                const std::vector<std::vector<Speeds>>& ts,
                const std::vector<std::vector<Speeds>>& lc) {
  const int n = absl::GetFlag(FLAGS_decode), p = absl::GetFlag(FLAGS_prefill);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  std::printf("model %s  treespec dtype %s  decode %d tokens (batch 1, greedy)  prefill %d tokens"
              "  rounds %d (medians)\n",
              model.c_str(), absl::GetFlag(FLAGS_dtype).empty() ? "default (f32)"
                                                               : absl::GetFlag(FLAGS_dtype).c_str(),
              n, p, rounds);
  if (with_llama) std::printf("llama.cpp: %s on %s\n", lb.c_str(), gguf.c_str());
  std::printf("\n%-8s %-8s %14s %14s %8s\n", "threads", "phase", "treespec tok/s",
              "llama.cpp tok/s", "ratio");
  auto med = [](const std::vector<Speeds>& v, bool dec) {
    std::vector<double> x;
    for (const Speeds& s : v) x.push_back(dec ? s.decode : s.prefill);
    return Median(x);
  };
  for (size_t i = 0; i < threads.size(); ++i) {
    for (bool dec : {true, false}) {
      const double a = med(ts[i], dec);
      if (with_llama) {
        const double b = med(lc[i], dec);
        std::printf("%-8d %-8s %14.1f %15.1f %7.2fx\n", threads[i], dec ? "decode" : "prefill", a,
                    b, a / b);
      } else {
        std::printf("%-8d %-8s %14.1f %15s %8s\n", threads[i], dec ? "decode" : "prefill", a, "-",
                    "-");
      }
    }
  }
  if (threads.size() > 1) {
    std::printf("\nscaling (treespec, %d threads / %d):  decode %.2fx  prefill %.2fx\n",
                threads.back(), threads.front(), med(ts.back(), true) / med(ts.front(), true),
                med(ts.back(), false) / med(ts.front(), false));
  }
}

// Sums n uint64 at p as the kernels read weights: 64-byte vector loads,
// prefetched kWeightPrefetchBytes ahead (the scalar fallback where the CPU lacks AVX-512).
__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint64_t* p, size_t n) {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
  for (size_t i = 0; i + 32 <= n; i += 32) {
    const char* ahead = reinterpret_cast<const char*>(p + i) + cpu::kWeightPrefetchBytes;
    for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm512_add_epi64(acc[j], _mm512_loadu_si512(p + i + 8 * j));
    }
  }
  return _mm512_reduce_add_epi64(
      _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3])));
}

uint64_t SumScalar(const uint64_t* p, size_t n) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  }
  uint64_t s = 0;
  for (uint64_t a : acc) s += a;
  return s;
}

// GB/s of `threads` threads summing disjoint slices of `buf` (best of 5).
double ReadBandwidth(const std::vector<uint64_t>& buf, int threads) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  std::vector<uint64_t> sums(threads);
  const size_t n = buf.size() / threads / 32 * 32;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const uint64_t* p = buf.data() + t * n;
        sums[t] = avx512 ? SumAvx512(p, n) : SumScalar(p, n);
      });
    }
    for (std::thread& w : workers) w.join();
    const double secs = Secs(t0, Clock::now());
    best = std::max(best, static_cast<double>(n * threads * 8) / secs / 1e9);
  }
  static volatile uint64_t sink;  // keeps the sums live
  for (uint64_t s : sums) sink = sink + s;
  return best;
}

void PrintBandwidth(const std::vector<int>& threads) {
  std::vector<uint64_t> buf((256u << 20) / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  std::printf("\nmemory read bandwidth (256 MiB, best of 5):");
  double first = 0;
  for (int t : threads) {
    const double gbs = ReadBandwidth(buf, t);
    if (first == 0) first = gbs;
    std::printf("  %d thread%s %.1f GB/s (%.2fx)", t, t == 1 ? "" : "s", gbs, gbs / first);
  }
  std::printf("\n");
}

int Main() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) Fail(absl::InvalidArgumentError("--model is required"));
  std::string gguf = absl::GetFlag(FLAGS_gguf);
  if (gguf.empty() && IsGgufPath(model)) gguf = model;
  std::string lb = absl::GetFlag(FLAGS_llama_bench);
  if (lb.empty()) lb = FindOnPath("llama-bench");
  const bool with_llama = !lb.empty() && !gguf.empty();
  const int n = absl::GetFlag(FLAGS_decode), p = absl::GetFlag(FLAGS_prefill);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (n < 1 || p < 1 || rounds < 1) {
    Fail(absl::InvalidArgumentError("--decode, --prefill and --rounds must be >= 1"));
  }
  absl::StatusOr<std::vector<int>> parsed = ParsePositiveInts("threads", absl::GetFlag(FLAGS_threads));
  if (!parsed.ok()) Fail(parsed.status());
  if (parsed->empty()) Fail(absl::InvalidArgumentError("--threads: no thread count"));
  const std::vector<int> threads = *parsed;
  std::vector<Engine> engines;
  for (int t : threads) {
    absl::StatusOr<Engine> e = OpenEngine(model, t, absl::GetFlag(FLAGS_dtype), n + p + 4);
    if (!e.ok()) Fail(e.status());
    engines.push_back(std::move(*e));
    // Warm-up: page in the weights, size the workspaces.
    if (absl::Status s = TimePrefill(engines.back(), p).status(); !s.ok()) Fail(s);
    if (absl::Status s = TimeDecode(engines.back(), 4).status(); !s.ok()) Fail(s);
  }
  // [thread index][round]
  std::vector<std::vector<Speeds>> ts(threads.size()), lc(threads.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < threads.size(); ++i) {
      Speeds s;
      absl::StatusOr<double> d = TimeDecode(engines[i], n);
      if (!d.ok()) Fail(d.status());
      absl::StatusOr<double> pf = TimePrefill(engines[i], p);
      if (!pf.ok()) Fail(pf.status());
      s.decode = *d;
      s.prefill = *pf;
      ts[i].push_back(s);
      if (with_llama) {
        absl::StatusOr<Speeds> l = RunLlamaBench(lb, gguf, threads[i], p, n);
        if (!l.ok()) Fail(l.status());
        lc[i].push_back(*l);
      }
    }
  }
  PrintTable(model, gguf, lb, with_llama, threads, ts, lc);
  if (absl::GetFlag(FLAGS_bandwidth)) PrintBandwidth(threads);
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  return treespec::Main();
}
