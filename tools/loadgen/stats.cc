#include "tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace treespec::loadgen {

void TokenTimeline::OnChunk(double at_s, int num_tokens) {
  if (num_tokens <= 0) return;
  if (tokens_ == 0) {
    first_s_ = at_s;
  } else {
    itl_.push_back(at_s - last_s_);
  }
  itl_.insert(itl_.end(), num_tokens - 1, 0.0);
  tokens_ += num_tokens;
  last_s_ = at_s;
}

void TokenTimeline::Finish(RequestResult* r) const {
  r->output_tokens = tokens_;
  r->itl_s = itl_;
  r->ttft_s = tokens_ > 0 ? first_s_ - sent_s_ : -1;
  r->tpot_s = tokens_ > 1 ? (last_s_ - first_s_) / static_cast<double>(tokens_ - 1) : -1;
}

Distribution Summarize(std::vector<double> v) {
  Distribution d;
  d.count = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / v.size();
  auto pct = [&v](double p) {
    const double pos = p * (v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  d.p50 = pct(0.5);
  d.p90 = pct(0.9);
  d.p99 = pct(0.99);
  d.max = v.back();
  return d;
}

bool MeetsSlo(const RequestResult& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms > 0 && (r.ttft_s < 0 || r.ttft_s * 1e3 > slo.ttft_ms)) return false;
  if (slo.tpot_ms > 0 && r.tpot_s >= 0 && r.tpot_s * 1e3 > slo.tpot_ms) return false;
  return true;
}

Summary Summarize(const std::vector<RequestResult>& results, double duration_s, const Slo& slo) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t steps = 0, accepted = 0, drafted = 0;
  for (const RequestResult& r : results) {
    s.num_requests += 1;
    if (!r.ok && r.client_cancelled && r.code == "CANCELLED") {
      s.num_client_cancelled += 1;
      continue;
    }
    if (!r.ok) {
      s.errors[r.code] += 1;
      continue;
    }
    s.num_ok += 1;
    s.output_tokens += r.output_tokens;
    s.prompt_tokens += r.prompt_tokens;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    if (r.tpot_s >= 0) tpot.push_back(r.tpot_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    if (MeetsSlo(r, slo)) s.num_good += 1;
    steps += r.steps;
    accepted += r.accepted_tokens;
    drafted += r.drafted_tokens;
  }
  s.ttft_s = Summarize(std::move(ttft));
  s.tpot_s = Summarize(std::move(tpot));
  s.itl_s = Summarize(std::move(itl));
  s.e2e_s = Summarize(std::move(e2e));
  if (duration_s > 0) {
    s.request_throughput = s.num_ok / duration_s;
    s.token_throughput = s.output_tokens / duration_s;
    s.goodput = s.num_good / duration_s;
  }
  if (steps > 0) s.mean_accepted_length = static_cast<double>(accepted + steps) / steps;
  if (drafted > 0) s.acceptance_rate = static_cast<double>(accepted) / drafted;
  return s;
}

namespace {

nlohmann::json DistJson(const Distribution& d) {
  return {{"count", d.count},         {"mean_ms", d.mean * 1e3}, {"p50_ms", d.p50 * 1e3},
          {"p90_ms", d.p90 * 1e3},    {"p99_ms", d.p99 * 1e3},   {"max_ms", d.max * 1e3}};
}

std::string DistRow(const char* name, const Distribution& d) {
  return absl::StrFormat("  %-22s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.mean * 1e3,
                         d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3, d.max * 1e3);
}

}  // namespace

nlohmann::json ToJson(const Summary& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [code, n] : s.errors) errors[code] = n;
  return {{"num_requests", s.num_requests},
          {"num_ok", s.num_ok},
          {"num_client_cancelled", s.num_client_cancelled},
          {"errors", errors},
          {"duration_s", s.duration_s},
          {"request_throughput", s.request_throughput},
          {"token_throughput", s.token_throughput},
          {"output_tokens", s.output_tokens},
          {"prompt_tokens", s.prompt_tokens},
          {"ttft", DistJson(s.ttft_s)},
          {"tpot", DistJson(s.tpot_s)},
          {"itl", DistJson(s.itl_s)},
          {"e2e", DistJson(s.e2e_s)},
          {"num_good", s.num_good},
          {"goodput", s.goodput},
          {"mean_accepted_length", s.mean_accepted_length},
          {"acceptance_rate", s.acceptance_rate}};
}

std::string FormatTable(const Summary& s) {
  std::string out;
  out += absl::StrFormat("  %-22s %10s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90",
                         "p99", "max");
  out += DistRow("time to first token", s.ttft_s);
  out += DistRow("time per output token", s.tpot_s);
  out += DistRow("inter-token latency", s.itl_s);
  out += DistRow("end-to-end", s.e2e_s);
  out += absl::StrFormat("  %-30s %d of %d ok in %.2f s\n", "requests", s.num_ok, s.num_requests,
                         s.duration_s);
  if (s.num_client_cancelled > 0) {
    out += absl::StrFormat("  %-30s %d\n", "cancelled by the client", s.num_client_cancelled);
  }
  for (const auto& [code, n] : s.errors) {
    out += absl::StrFormat("  %-30s %d\n", "errors " + code, n);
  }
  out += absl::StrFormat("  %-30s %.2f req/s\n", "request throughput", s.request_throughput);
  out += absl::StrFormat("  %-30s %.1f tok/s (%d tokens)\n", "output token throughput",
                         s.token_throughput, s.output_tokens);
  out += absl::StrFormat("  %-30s %.2f req/s (%d met the SLOs)\n", "goodput", s.goodput, s.num_good);
  out += absl::StrFormat("  %-30s %.3f tokens/step (acceptance %.1f%%)\n", "mean accepted length",
                         s.mean_accepted_length, 100.0 * s.acceptance_rate);
  return out;
}

}  // namespace treespec::loadgen
