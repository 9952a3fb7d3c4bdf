// Load-test statistics: per-request measurements and their summary.
//
// Token timing convention (the same as the coordinator's metrics,
// coordinator/telemetry.h): a streamed chunk of k tokens arriving at t counts
// as k tokens arriving at t. TTFT is the time from sending the request to the
// first chunk with a token. Inter-token latency is per token: a chunk that
// arrives a gap g after the previous token contributes one gap g and k−1 gaps
// of 0 (the first chunk contributes its k−1 zeros only), so a request with n
// tokens has n−1 ITL samples. TPOT is per request: (last token − first token)
// / (n − 1). End-to-end latency runs from send to the end of the stream.
// Percentiles interpolate linearly between order statistics.
//
// Goodput counts the successful requests that met every SLO given (TTFT and
// TPOT; a request with one token has no TPOT and meets that SLO).
// Pure functions; no I/O besides formatting.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace treespec::loadgen {

struct RequestResult {
  bool ok = false;
  std::string code = "OK";  // gRPC status code name
  std::string message;      // the status message when not OK
  double scheduled_s = 0;   // open loop: the Poisson arrival time; closed loop: = start_s
  double start_s = 0;       // sent, since the run started (latencies count from here)
  double ttft_s = -1;       // -1: no token
  double e2e_s = 0;
  double tpot_s = -1;       // -1: fewer than two tokens
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  std::vector<double> itl_s;  // per token (see above)
  int32_t steps = 0;
  int32_t drafted_tokens = 0;
  int32_t accepted_tokens = 0;
  // The load generator cancelled it on purpose after its first token
  // (LoadOptions::cancel_every); ending CANCELLED is then no error.
  bool client_cancelled = false;
};

// Builds a RequestResult's token timings from chunk arrivals.
class TokenTimeline {
 public:
  explicit TokenTimeline(double sent_s) : sent_s_(sent_s) {}
  void OnChunk(double at_s, int num_tokens);
  // Fills ttft_s, tpot_s, itl_s and output_tokens.
  void Finish(RequestResult* r) const;

 private:
  double sent_s_;
  double first_s_ = -1, last_s_ = -1;
  int64_t tokens_ = 0;
  std::vector<double> itl_;
};

struct Slo {
  double ttft_ms = 0;  // 0: no bound
  double tpot_ms = 0;
};

struct Distribution {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Distribution Summarize(std::vector<double> values);

struct Summary {
  int64_t num_requests = 0;
  int64_t num_ok = 0;
  int64_t num_client_cancelled = 0;  // cancelled on purpose and ended CANCELLED: no error
  std::map<std::string, int64_t> errors;  // by code name
  double duration_s = 0;
  double request_throughput = 0;  // successful requests / s
  double token_throughput = 0;    // output tokens / s
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  Distribution ttft_s, tpot_s, itl_s, e2e_s;
  int64_t num_good = 0;           // met the SLOs
  double goodput = 0;             // good requests / s
  double mean_accepted_length = 0;  // tokens per verification step (accepted + bonus)
  double acceptance_rate = 0;       // accepted / drafted tokens
};

Summary Summarize(const std::vector<RequestResult>& results, double duration_s, const Slo& slo);
bool MeetsSlo(const RequestResult& r, const Slo& slo);

// The summary as JSON (times in milliseconds) and as a printable table.
nlohmann::json ToJson(const Summary& s);
std::string FormatTable(const Summary& s);

}  // namespace treespec::loadgen
